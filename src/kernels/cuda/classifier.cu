// The LM head fused with softmax and cross-entropy on the GPU, in row chunks
// so the full [N, V] logits never exist: per chunk, logits by cuBLAS, then one
// block per row computes the log-sum-exp, the loss and (with gradients)
// d(logits) in place, then dx (overwritten) and dwte (+=) by two more GEMMs.
// A chunk's logits take at most 256 MiB (fp32) or 1 GiB (bf16, the path
// built for speed), and the chunks are made even. Each chunk re-reads and
// re-writes the fp32 dwte (154 MiB at GPT-2's 50304 x 768), so fewer, larger
// chunks save traffic: GPT-2 124M at 16 x 1024 tokens takes 2 bf16 chunks.
// The row kernel reads the logits twice (an online log-sum-exp, then
// d(logits)). bf16 (mixed precision): x, wte and the chunk's logits in bf16
// (as PyTorch's autocast has them), the softmax and losses in fp32, d(logits)
// as bf16 in place for the two gradient GEMMs (dwte in fp32). The sampling
// path (classifier_logits) stays fp32. Low-precision products with fp32
// activations (lowp.cuh: fp16, or the FP8 policy's bf16-rounded head) round
// x and wte once and each chunk's d(logits) once, as the CPU's.
#include <cfloat>

#include "kernels/classifier.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/lowp.cuh"
#include "kernels/matmul.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// Rows per chunk for logits of `elem` bytes: as many as fit, then spread
// evenly over the chunks that takes.
int64_t chunk_rows(int64_t N, int64_t V, int64_t elem) {
  const int64_t budget = elem == 4 ? int64_t{256} << 20 : int64_t{1024} << 20;
  int64_t most = budget / ((V > 0 ? V : 1) * elem);
  most = most < 1 ? 1 : most;
  if (N <= most) return N > 0 ? N : 1;
  const int64_t chunks = (N + most - 1) / most;
  return (N + chunks - 1) / chunks;
}

// (max, sum of exp(l - max)) of a thread's share of a row, merged online.
struct MaxSum {
  float m = -FLT_MAX, s = 0.0f;
  __device__ __forceinline__ void add(float l) {
    if (l > m) {
      s = s * expf(m - l) + 1.0f;
      m = l;
    } else {
      s += expf(l - m);
    }
  }
  __device__ __forceinline__ void merge(float m2, float s2) {
    const float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
  }
};

// One block per row: the log-sum-exp in one pass over the logits (16-byte
// loads where V and the pointers allow), the loss, then d(logits) into
// dlogits (which may alias logits) in a second pass.
template <class TL>
__global__ void softmax_xent(float* losses, const TL* logits, TL* dlogits, const int32_t* targets, int64_t V,
                             float dloss, bool want_grad, bool vec) {
  constexpr int W = Vec16<TL>::n;
  __shared__ float shm[32], shs[32];
  const TL* l = logits + blockIdx.x * V;
  TL* dl = dlogits + blockIdx.x * V;
  MaxSum ms;
  if (vec) {
    for (int64_t v = threadIdx.x * W; v < V; v += blockDim.x * W) {
      const Vec16<TL> x = load16(l + v);
      for (int k = 0; k < W; ++k) ms.add(x.get(k));
    }
  } else {
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) ms.add(to_f(l[v]));
  }
  for (int o = 16; o > 0; o >>= 1)
    ms.merge(__shfl_xor_sync(0xffffffffu, ms.m, o), __shfl_xor_sync(0xffffffffu, ms.s, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) {
    shm[warp] = ms.m;
    shs[warp] = ms.s;
  }
  __syncthreads();
  MaxSum all;
  for (int w = 0; w < warps; ++w) all.merge(shm[w], shs[w]);  // the same order in every thread
  const float lse = all.m + logf(all.s);
  const int32_t t = targets[blockIdx.x];
  if (threadIdx.x == 0) losses[blockIdx.x] = lse - to_f(l[t]);
  __syncthreads();  // the loss reads l[t] before it is overwritten
  if (!want_grad) return;
  if (vec) {
    for (int64_t v = threadIdx.x * W; v < V; v += blockDim.x * W) {
      const Vec16<TL> x = load16(l + v);
      Vec16<TL> d;
      for (int k = 0; k < W; ++k) d.set(k, (expf(x.get(k) - lse) - (v + k == t ? 1.0f : 0.0f)) * dloss);
      store16(dl + v, d);
    }
  } else {
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
      dl[v] = from_f<TL>((expf(to_f(l[v]) - lse) - (v == t ? 1.0f : 0.0f)) * dloss);
  }
}

// One chunked loop for both element types: the logits of a chunk are E
// (fp32, or bf16 in mixed precision as autocast makes them) and d(logits)
// is written over them in place.
template <class E>
void forward_backward(float* losses, E* dx, float* dwte, const E* x, const E* wte, const int32_t* targets, int64_t N,
                      int64_t C, int64_t V, float dloss, float* workspace) {
  const int64_t rows = chunk_rows(N, V, sizeof(E));
  E* logits = reinterpret_cast<E*>(workspace);
  const bool vec = V % Vec16<E>::n == 0 && aligned16(workspace);  // every row of the chunk starts 16-byte aligned
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = r0 + rows < N ? rows : N - r0;
    gemm(false, true, n, V, C, 1.0f, x + r0 * C, C, wte, C, 0.0f, logits, V);
    softmax_xent<<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(losses + r0, logits, logits, targets + r0, V,
                                                                      dloss, dx != nullptr, vec);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.classifier");
    if (dx) {
      gemm(false, false, n, C, V, 1.0f, logits, V, wte, C, 0.0f, dx + r0 * C, C);
      gemm(true, false, V, C, n, 1.0f, logits, V, x + r0 * C, C, 1.0f, dwte, C);
    }
  }
}

// fp32 logits of the rounded operands; d(logits) rounded once for both gradient products.
template <class P>
void forward_backward_lowp(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                           const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss, float* workspace) {
  const int64_t rows = chunk_rows(N, V, 4);
  const auto* xl = P::operand(0, x, N * C);
  const auto* wl = P::operand(1, wte, V * C);
  const bool vec = V % Vec16<float>::n == 0 && aligned16(workspace);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = r0 + rows < N ? rows : N - r0;
    P::gemm(false, true, n, V, C, xl + r0 * C, wl, 0.0f, workspace, V);
    softmax_xent<<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(losses + r0, workspace, workspace, targets + r0,
                                                                      V, dloss, dx != nullptr, vec);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.classifier");
    if (dx) {
      const auto* dl = P::rounded(workspace, n, V);
      P::gemm(false, false, n, C, V, dl, wl, 0.0f, dx + r0 * C, C);
      P::gemm(true, false, V, C, n, dl, xl + r0 * C, 1.0f, dwte, C);
    }
  }
}

template <class P>
void logits_lowp(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  P::gemm(false, true, N, V, C, P::operand(0, x, N * C), P::operand(1, wte, V * C), 0.0f, logits, V);
}
}  // namespace

int64_t classifier_workspace_floats(int64_t N, int64_t V, int) {
  return chunk_rows(N, V, 4) * V;
}
int64_t classifier_workspace_floats_bf16(int64_t N, int64_t V, int) {
  return (chunk_rows(N, V, 2) * V + 1) / 2;  // bf16 logits, then d(logits) in place
}

void classifier_forward_backward(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                 const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                 float* workspace) {
  forward_backward(losses, dx, dwte, x, wte, targets, N, C, V, dloss, workspace);
}
void classifier_forward_backward(float* losses, bfloat16* dx, float* dwte, const bfloat16* x, const bfloat16* wte,
                                 const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                 float* workspace) {
  forward_backward(losses, dx, dwte, x, wte, targets, N, C, V, dloss, workspace);
}

void classifier_logits(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  gemm(false, true, N, V, C, 1.0f, x, C, wte, C, 0.0f, logits, V);
}

void classifier_forward_backward_f16p(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                      const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                      float* workspace) {
  forward_backward_lowp<F16Products>(losses, dx, dwte, x, wte, targets, N, C, V, dloss, workspace);
}
void classifier_logits_f16p(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  logits_lowp<F16Products>(logits, x, wte, N, C, V);
}
void classifier_forward_backward_bf16r(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                       const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                       float* workspace) {
  forward_backward_lowp<Bf16Rounded>(losses, dx, dwte, x, wte, targets, N, C, V, dloss, workspace);
}
void classifier_logits_bf16r(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  logits_lowp<Bf16Rounded>(logits, x, wte, N, C, V);
}

void classifier_logits(float* logits, const bfloat16* x, const bfloat16* wte, int64_t N, int64_t C, int64_t V) {
  gemm(false, true, N, V, C, 1.0f, x, C, wte, C, 0.0f, logits, V);
}

}  // namespace parallm::kernels::cuda
