// Vocabulary-parallel embedding and cross-entropy on the GPU (contract:
// kernels/vocab_parallel.h). The embedding forward is a grid-stride loop
// writing this rank's part (its row of wte, wpe, both or zero). The backward
// is embedding.cu's, restricted to the rank's rows: the positions are sorted
// by token (CUB's stable radix sort), and one block per run of equal tokens
// in [v0, v0 + vn) adds its rows of dout in position order into dwte (no
// atomics; the same bits on every run); dwpe, where given, sums over the
// batch in order. The cross-entropy steps take one block per row of the
// [N, vn] fp32 logits: the row maximum, then the sum of exp(l - max) with the
// target's logit, each reduced over the block in a fixed order (16-byte loads
// where vn and the pointer allow); the losses are elementwise; d(logits) is
// written in place (float) or into bf16, with exact zeros in padded columns.
#include <cub/device/device_radix_sort.cuh>

#include "core/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/vocab_parallel.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ float neg_inf() {
  return __int_as_float(static_cast<int>(0xff800000u));
}

template <class T>
__global__ void vp_emb_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t BT, int64_t Tn,
                               int64_t C, int64_t v0, int64_t vn) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < BT * C; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t bt = i / C, c = i % C, v = tokens[bt] - v0;
    const bool mine = v >= 0 && v < vn;
    if (mine && wpe)
      out[i] = from_f<T>(to_f(wte[v * C + c]) + to_f(wpe[(bt % Tn) * C + c]));
    else if (mine)
      out[i] = wte[v * C + c];
    else if (wpe)
      out[i] = wpe[(bt % Tn) * C + c];
    else
      out[i] = from_f<T>(0.0f);
  }
}

// As embedding.cu's emb_backward_wte: block (s, y) handles sorted position s
// if it starts a run of equal tokens and the token is this rank's, for
// columns [y * blockDim.x, (y + 1) * blockDim.x); the run's end by binary
// search; kSplit rows of threads take every kSplit-th row of the run and
// their partial sums are added in row order.
constexpr int kSplit = 8;
template <class T>
__global__ void vp_emb_backward_wte(float* dwte, const T* dout, const int32_t* sorted_tok, const int32_t* sorted_pos,
                                    int64_t BT, int64_t C, int64_t v0, int64_t vn) {
  __shared__ int64_t end_sh;
  __shared__ float part[kSplit][128];
  const int64_t s = blockIdx.x;
  const int32_t tok = sorted_tok[s];
  if (s > 0 && sorted_tok[s - 1] == tok) return;
  const int64_t row = tok - v0;
  if (row < 0 || row >= vn) return;  // another rank's token (the whole block leaves)
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    int64_t lo = s + 1, hi = BT;  // first index in [lo, hi) whose token differs
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted_tok[mid] == tok)
        lo = mid + 1;
      else
        hi = mid;
    }
    end_sh = lo;
  }
  __syncthreads();
  const int64_t end = end_sh, c = blockIdx.y * int64_t{blockDim.x} + threadIdx.x;
  float acc = 0;
  if (c < C) {
#pragma unroll 4
    for (int64_t k = s + threadIdx.y; k < end; k += kSplit)
      acc += to_f(dout[static_cast<int64_t>(sorted_pos[k]) * C + c]);
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float sum = part[0][threadIdx.x];
  for (int y = 1; y < kSplit; ++y) sum += part[y][threadIdx.x];
  dwte[row * C + c] += sum;
}

template <class T>
__global__ void vp_emb_backward_wpe(float* dwpe, const T* dout, int64_t B, int64_t Tn, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < Tn * C; i += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0;
    for (int64_t b = 0; b < B; ++b) acc += to_f(dout[b * Tn * C + i]);
    dwpe[i] += acc;
  }
}

__global__ void vp_iota(int32_t* v, int64_t n) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) v[i] = static_cast<int32_t>(i);
}

template <class E>
void emb_fwd(E* out, const int32_t* tokens, const E* wte, const E* wpe, int64_t B, int64_t T, int64_t C, int64_t v0,
             int64_t vn) {
  if (B * T * C <= 0) return;
  vp_emb_forward<<<capped_blocks(B * T * C, 256), 256, 0, stream()>>>(out, tokens, wte, wpe, B * T, T, C, v0, vn);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.vp_embedding_forward");
}

template <class E>
void emb_bwd(float* dwte, float* dwpe, const E* dout, const int32_t* tokens, int64_t B, int64_t T, int64_t C,
             int64_t v0, int64_t vn) {
  const int64_t BT = B * T;
  if (BT * C <= 0) return;
  PARALLM_CHECK(BT < (int64_t{1} << 31), ShapeError, "kernels.cuda.vp_embedding_backward", "B*T = {} too large", BT);
  const int n = static_cast<int>(BT);
  if (vn > 0) {
    // Sort (token, position) pairs by token; the sort is stable, so runs keep position order.
    size_t temp_bytes = 0;
    PARALLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, static_cast<int32_t*>(nullptr),
                                                       static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                                       n, 0, 32, stream()),
                       "kernels.cuda.vp_embedding_backward");
    temp_bytes = (temp_bytes + 255) / 256 * 256;  // CUB's temporaries first, at the buffer's aligned start
    gpu::DeviceBuffer buf(temp_bytes + 3 * static_cast<size_t>(n) * sizeof(int32_t), MemCategory::Scratch);
    void* temp = buf.data();
    int32_t* pos_in = reinterpret_cast<int32_t*>(static_cast<char*>(buf.data()) + temp_bytes);
    int32_t* sorted_tok = pos_in + n;
    int32_t* sorted_pos = sorted_tok + n;
    vp_iota<<<blocks_for(n, 256), 256, 0, stream()>>>(pos_in, n);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.vp_embedding_backward");
    PARALLM_CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_tok, pos_in, sorted_pos, n, 0, 32, stream()),
        "kernels.cuda.vp_embedding_backward");
    const int threads = C < 128 ? static_cast<int>((C + 31) / 32 * 32) : 128;
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((C + threads - 1) / threads));
    vp_emb_backward_wte<<<grid, dim3(threads, kSplit), 0, stream()>>>(dwte, dout, sorted_tok, sorted_pos, BT, C, v0,
                                                                      vn);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.vp_embedding_backward");
  }
  if (dwpe) {
    vp_emb_backward_wpe<<<capped_blocks(T * C, 256), 256, 0, stream()>>>(dwpe, dout, B, T, C);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.vp_embedding_backward");
  }
}

// f(l) for each of l[0, valid), by the block's threads; 16-byte loads when vec
// (the row starts 16-byte aligned), then the tail element by element.
template <class F>
__device__ __forceinline__ void for_valid(const float* l, int64_t valid, bool vec, F f) {
  int64_t start = 0;
  if (vec) {
    const int64_t nv = valid / 4 * 4;
    for (int64_t j = threadIdx.x * int64_t{4}; j < nv; j += blockDim.x * int64_t{4}) {
      const float4 x = *reinterpret_cast<const float4*>(l + j);
      f(x.x);
      f(x.y);
      f(x.z);
      f(x.w);
    }
    start = nv;
  }
  for (int64_t j = start + threadIdx.x; j < valid; j += blockDim.x) f(l[j]);
}

// Maximum over the block with -inf for no values; every thread gets it.
__device__ __forceinline__ float block_max_or_neg_inf(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_max(lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : neg_inf());
}

__global__ void local_max_rows(float* mx, const float* logits, int64_t vn, int64_t valid, bool vec) {
  __shared__ float sh[32];
  const float* l = logits + blockIdx.x * vn;
  float m = neg_inf();
  for_valid(l, valid, vec, [&](float x) { m = fmaxf(m, x); });
  m = block_max_or_neg_inf(m, sh);
  if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

__global__ void exp_sums_rows(float* sums, const float* logits, const float* mx, const int32_t* targets, int64_t N,
                              int64_t vn, int64_t valid, int64_t v0, bool vec) {
  __shared__ float sh[32];
  const int64_t i = blockIdx.x;
  const float* l = logits + i * vn;
  const float m = mx[i];
  float s = 0.0f;
  for_valid(l, valid, vec, [&](float x) { s += expf(x - m); });
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    sums[i] = s;
    const int64_t t = targets[i] - v0;
    sums[N + i] = t >= 0 && t < valid ? l[t] : 0.0f;
  }
}

__global__ void losses_elems(float* losses, const float* mx, const float* sums, int64_t N) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N; i += int64_t{gridDim.x} * blockDim.x)
    losses[i] = logf(sums[i]) + mx[i] - sums[N + i];
}

template <class A>
__device__ __forceinline__ void store4(A* p, float a, float b, float c, float d);
template <>
__device__ __forceinline__ void store4<float>(float* p, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}
template <>
__device__ __forceinline__ void store4<bfloat16>(bfloat16* p, float a, float b, float c, float d) {
  const uint32_t lo = from_f<bfloat16>(a).bits | static_cast<uint32_t>(from_f<bfloat16>(b).bits) << 16;
  const uint32_t hi = from_f<bfloat16>(c).bits | static_cast<uint32_t>(from_f<bfloat16>(d).bits) << 16;
  *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
}

// One block per row over all vn columns: dloss * (exp(l - mx) / se - onehot)
// for j < valid, exactly 0 after. dlogits may alias logits (A = float): each
// element is read, then written, by one thread.
template <class A>
__global__ void grad_rows(A* dlogits, const float* logits, const float* mx, const float* se, const int32_t* targets,
                          int64_t vn, int64_t valid, int64_t v0, float dloss, bool vec) {
  const int64_t i = blockIdx.x;
  const float* l = logits + i * vn;
  A* d = dlogits + i * vn;
  const float m = mx[i], scale = dloss / se[i];
  const int64_t t = targets[i] - v0;
  auto g = [&](int64_t j, float x) { return j < valid ? expf(x - m) * scale - (j == t ? dloss : 0.0f) : 0.0f; };
  if (vec) {
    for (int64_t j = threadIdx.x * int64_t{4}; j < vn; j += blockDim.x * int64_t{4}) {
      const float4 x = *reinterpret_cast<const float4*>(l + j);
      store4(d + j, g(j, x.x), g(j + 1, x.y), g(j + 2, x.z), g(j + 3, x.w));
    }
  } else {
    for (int64_t j = threadIdx.x; j < vn; j += blockDim.x) d[j] = from_f<A>(g(j, l[j]));
  }
}

template <class A>
void grad(A* dlogits, const float* logits, const float* mx, const float* se, const int32_t* targets, int64_t N,
          int64_t vn, int64_t valid, int64_t v0, float dloss) {
  if (N <= 0 || vn <= 0) return;
  const bool vec = vn % 4 == 0 && aligned16(logits, dlogits);
  grad_rows<<<static_cast<unsigned>(N), kThreads, 0, stream()>>>(dlogits, logits, mx, se, targets, vn, valid, v0, dloss,
                                                                 vec);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.xent_vp_grad");
}
}  // namespace

void vp_embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                          int64_t C, int64_t v0, int64_t vn) {
  emb_fwd(out, tokens, wte, wpe, B, T, C, v0, vn);
}
void vp_embedding_forward(bfloat16* out, const int32_t* tokens, const bfloat16* wte, const bfloat16* wpe, int64_t B,
                          int64_t T, int64_t C, int64_t v0, int64_t vn) {
  emb_fwd(out, tokens, wte, wpe, B, T, C, v0, vn);
}
void vp_embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                           int64_t C, int64_t v0, int64_t vn) {
  emb_bwd(dwte, dwpe, dout, tokens, B, T, C, v0, vn);
}
void vp_embedding_backward(float* dwte, float* dwpe, const bfloat16* dout, const int32_t* tokens, int64_t B, int64_t T,
                           int64_t C, int64_t v0, int64_t vn) {
  emb_bwd(dwte, dwpe, dout, tokens, B, T, C, v0, vn);
}

void xent_vp_local_max(float* mx, const float* logits, int64_t N, int64_t vn, int64_t valid) {
  if (N <= 0) return;
  const bool vec = vn % 4 == 0 && aligned16(logits);
  local_max_rows<<<static_cast<unsigned>(N), kThreads, 0, stream()>>>(mx, logits, vn, valid, vec);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.xent_vp_local_max");
}

void xent_vp_exp_sums(float* sums, const float* logits, const float* mx, const int32_t* targets, int64_t N, int64_t vn,
                      int64_t valid, int64_t v0) {
  if (N <= 0) return;
  const bool vec = vn % 4 == 0 && aligned16(logits);
  exp_sums_rows<<<static_cast<unsigned>(N), kThreads, 0, stream()>>>(sums, logits, mx, targets, N, vn, valid, v0, vec);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.xent_vp_exp_sums");
}

void xent_vp_losses(float* losses, const float* mx, const float* sums, int64_t N) {
  if (N <= 0) return;
  losses_elems<<<capped_blocks(N, 256), 256, 0, stream()>>>(losses, mx, sums, N);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.xent_vp_losses");
}

void xent_vp_grad(float* dlogits, const float* logits, const float* mx, const float* se, const int32_t* targets,
                  int64_t N, int64_t vn, int64_t valid, int64_t v0, float dloss) {
  grad(dlogits, logits, mx, se, targets, N, vn, valid, v0, dloss);
}
void xent_vp_grad(bfloat16* dlogits, const float* logits, const float* mx, const float* se, const int32_t* targets,
                  int64_t N, int64_t vn, int64_t valid, int64_t v0, float dloss) {
  grad(dlogits, logits, mx, se, targets, N, vn, valid, v0, dloss);
}

}  // namespace parallm::kernels::cuda
