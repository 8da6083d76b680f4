// Causal self-attention on the GPU, built from cuBLAS batched GEMMs over the
// heads of one sequence at a time plus two row kernels:
//   forward:  S = Q K^T;  row kernel: lse, P = exp(scale*S - lse) (dropped);  O = P V
//   backward: S = Q K^T, dPd = dO V^T;  row kernel: P from lse, dP = dPd*mask,
//             D = sum P dP, dS = scale * P (dP - D), Pd = P*mask;
//             dV = Pd^T dO, dQ = dS K, dK = dS^T Q
// fp32: the workspace holds two [NH, T, T] matrices for the current sequence
// and the row kernels work in place. bf16 (mixed precision): the products run
// on tensor cores with fp32 accumulation, S and dPd stay fp32, and the row
// kernels write P (and dS) as bf16 for the next products: three [NH, T, T]
// fp32 matrices' worth. Only lse is kept between forward and backward.
// bf16 with 64-wide heads (GPT-2's shapes) takes fused kernels instead:
// without attention dropout cuDNN's flash attention where it is built and has
// an engine (cudnn_attention.cpp), else (and with dropout, whose masks must be
// parallm's Philox masks) the flash-style kernels of flash_attention.cu.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>

#include "core/env.h"
#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/matmul.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// One block per row (h, i) of one sequence b: reads the scores S, writes lse
// and P (dropped, rescaled; zero above the diagonal). P may alias S.
template <class TP>
__global__ void softmax_forward(const float* S, TP* P, float* lse, int64_t T, float scale, AttnDropout drop,
                                int64_t bh0) {
  __shared__ float sh[32];
  const int64_t h = blockIdx.x / T, i = blockIdx.x % T;
  const float* s = S + (h * T + i) * T;
  TP* pr = P + (h * T + i) * T;
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, s[j] * scale);
  mx = block_max(mx, sh);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(s[j] * scale - mx);
  sum = block_sum(sum, sh);
  const float l = mx + logf(sum);
  if (threadIdx.x == 0) lse[h * T + i] = l;
  const uint64_t row = static_cast<uint64_t>(((bh0 + h) * T + i) * T);
  const float keep_scale = drop.p > 0 ? 1.0f / (1.0f - drop.p) : 1.0f;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    float p = j <= i ? expf(s[j] * scale - l) : 0.0f;
    if (drop.p > 0 && j <= i) p = dropout_keep(drop.p, drop.seed, drop.stream, row + j) ? p * keep_scale : 0.0f;
    pr[j] = from_f<TP>(p);
  }
}

// One block per row: S (scores) and dP (dO V^T) in; Pd = P*mask and
// dS = scale * P * (dP*mask - D) out. Pd may alias S and dS alias dP.
template <class TP>
__global__ void softmax_backward(const float* S, const float* dP, TP* Pd, TP* dS, const float* lse, int64_t T,
                                 float scale, AttnDropout drop, int64_t bh0) {
  __shared__ double sh[32];
  const int64_t h = blockIdx.x / T, i = blockIdx.x % T, o = (h * T + i) * T;
  const float* s = S + o;
  const float* g = dP + o;
  const float l = lse[h * T + i];
  const uint64_t row = static_cast<uint64_t>(((bh0 + h) * T + i) * T);
  const float keep_scale = drop.p > 0 ? 1.0f / (1.0f - drop.p) : 1.0f;
  double d = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    float p = expf(s[j] * scale - l);
    float mask = drop.p > 0 ? (dropout_keep(drop.p, drop.seed, drop.stream, row + j) ? keep_scale : 0.0f) : 1.0f;
    d += static_cast<double>(p) * (g[j] * mask);
  }
  const float D = static_cast<float>(block_sum(d, sh));
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    float pd = 0.0f, ds = 0.0f;
    if (j <= i) {
      float p = expf(s[j] * scale - l);
      float mask = drop.p > 0 ? (dropout_keep(drop.p, drop.seed, drop.stream, row + j) ? keep_scale : 0.0f) : 1.0f;
      ds = scale * p * (g[j] * mask - D);
      pd = p * mask;
    }
    dS[o + j] = from_f<TP>(ds);
    Pd[o + j] = from_f<TP>(pd);
  }
}

// Batched products over the heads (fp32, or bf16 inputs with C of either type).
template <class TA, class TC>
void bgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const TA* A, int64_t lda, int64_t sa, const TA* B,
           int64_t ldb, int64_t sb, TC* C, int64_t ldc, int64_t sc, int64_t batch) {
  gemm_strided_batched(ta, tb, M, N, K, 1.0f, A, lda, sa, B, ldb, sb, 0.0f, C, ldc, sc, batch);
}

// Where S, P (forward), dP, Pd and dS (backward) live in the workspace.
template <class T>
struct Work {
  float *S, *dP;
  T *P, *Pd, *dS;
  Work(float* ws, int64_t n) : S(ws), dP(ws + n) {
    if constexpr (std::is_same_v<T, float>) {
      P = Pd = S;
      dS = dP;
    } else {
      P = reinterpret_cast<T*>(ws + n);  // forward: the dP region
      Pd = reinterpret_cast<T*>(ws + 2 * n);
      dS = Pd + n;
    }
  }
};

template <class E>
void forward(E* out, float* lse, const E* qkv, int64_t B, int64_t Tn, int64_t C, int64_t NH, AttnDropout drop,
             float* workspace) {
  const int64_t T = Tn, HS = C / NH, C3 = 3 * C, TT = T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  Work<E> w(workspace, NH * TT);
  for (int64_t b = 0; b < B; ++b) {
    const E* q = qkv + b * T * C3;
    bgemm(false, true, T, T, HS, q, C3, HS, q + C, C3, HS, w.S, T, TT, NH);
    softmax_forward<<<static_cast<unsigned>(NH * T), kThreads, 0, stream()>>>(w.S, w.P, lse + b * NH * T, T, scale,
                                                                              drop, drop.global_bh(b, 0, NH));
    PARALLM_CUDA_LAUNCHED("kernels.cuda.attention_forward");
    bgemm(false, false, T, HS, T, w.P, T, TT, q + 2 * C, C3, HS, out + b * T * C, C, HS, NH);
  }
}

template <class E>
void backward(E* dqkv, const E* dout, const E* qkv, const float* lse, int64_t B, int64_t Tn, int64_t C, int64_t NH,
              AttnDropout drop, float* workspace) {
  const int64_t T = Tn, HS = C / NH, C3 = 3 * C, TT = T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  Work<E> w(workspace, NH * TT);
  for (int64_t b = 0; b < B; ++b) {
    const E* q = qkv + b * T * C3;
    const E* dy = dout + b * T * C;
    E* dq = dqkv + b * T * C3;
    bgemm(false, true, T, T, HS, q, C3, HS, q + C, C3, HS, w.S, T, TT, NH);
    bgemm(false, true, T, T, HS, dy, C, HS, q + 2 * C, C3, HS, w.dP, T, TT, NH);
    softmax_backward<<<static_cast<unsigned>(NH * T), kThreads, 0, stream()>>>(
        w.S, w.dP, w.Pd, w.dS, lse + b * NH * T, T, scale, drop, drop.global_bh(b, 0, NH));
    PARALLM_CUDA_LAUNCHED("kernels.cuda.attention_backward");
    bgemm(true, false, T, HS, T, w.Pd, T, TT, dy, C, HS, dq + 2 * C, C3, HS, NH);  // dV
    bgemm(false, false, T, HS, T, w.dS, T, TT, q + C, C3, HS, dq, C3, HS, NH);     // dQ
    bgemm(true, false, T, HS, T, w.dS, T, TT, q, C3, HS, dq + C, C3, HS, NH);      // dK
  }
}
}  // namespace

int64_t attention_workspace_floats(int64_t, int64_t T, int64_t, int64_t NH, int) {
  return 2 * NH * T * T;
}

namespace {
// The choice: set_attention_impl's, else PARALLM_ATTENTION's on first use.
std::optional<AttentionImpl> g_impl;
AttentionImpl impl() {
  if (!g_impl) {
    const std::string v = env::value(env::Var::Attention);
    PARALLM_CHECK(v == "cudnn" || v == "cudnn-fast" || v == "own", ConfigError, "kernels.cuda.attention",
                  "PARALLM_ATTENTION={} is none of cudnn, cudnn-fast, own", v);
    g_impl = v == "own" ? AttentionImpl::Own : v == "cudnn-fast" ? AttentionImpl::CudnnFast : AttentionImpl::Cudnn;
  }
  return *g_impl;
}
int64_t ws_floats(int64_t B, int64_t T, int64_t C, int64_t NH) {
  return attention_workspace_floats_bf16(B, T, C, NH, 1);
}
}  // namespace

#ifndef PARALLM_CUDNN
bool cudnn_attention_forward(bfloat16*, float*, const bfloat16*, int64_t, int64_t, int64_t, int64_t, float*, int64_t) {
  return false;
}
bool cudnn_attention_backward(bfloat16*, const bfloat16*, const bfloat16*, const bfloat16*, const float*, int64_t,
                              int64_t, int64_t, int64_t, bool, float*, int64_t) {
  return false;
}
int64_t cudnn_attention_workspace_floats(int64_t, int64_t, int64_t, int64_t) {
  return 0;
}
bool cudnn_attention_built() {
  return false;
}
int64_t cudnn_attention_calls() {
  return 0;
}
#endif

int64_t attention_workspace_floats_bf16(int64_t B, int64_t T, int64_t C, int64_t NH, int) {
  return std::max(
      {3 * NH * T * T, flash_attention_workspace_floats(B, T, NH), cudnn_attention_workspace_floats(B, T, C, NH)});
}

AttentionImpl set_attention_impl(AttentionImpl choice) {
  const AttentionImpl before = impl();
  g_impl = choice;
  return before;
}
AttentionImpl attention_impl() {
  return impl();
}

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       AttnDropout drop, float* workspace) {
  forward(out, lse, qkv, B, T, C, NH, drop, workspace);
}
void attention_forward(bfloat16* out, float* lse, const bfloat16* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       AttnDropout drop, float* workspace) {
  if (flash_attention_applies(C, NH, {qkv, out})) {
    if (drop.p == 0.0f && impl() != AttentionImpl::Own &&
        cudnn_attention_forward(out, lse, qkv, B, T, C, NH, workspace, ws_floats(B, T, C, NH)))
      return;
    return flash_attention_forward(out, lse, qkv, B, T, C, NH, drop);
  }
  forward(out, lse, qkv, B, T, C, NH, drop, workspace);
}
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float*, const float* lse, int64_t B,
                        int64_t T, int64_t C, int64_t NH, AttnDropout drop, float* workspace) {
  backward(dqkv, dout, qkv, lse, B, T, C, NH, drop, workspace);
}
void attention_backward(bfloat16* dqkv, const bfloat16* dout, const bfloat16* qkv, const bfloat16* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, AttnDropout drop,
                        float* workspace) {
  if (flash_attention_applies(C, NH, {qkv, out, dout, dqkv})) {
    if (drop.p == 0.0f && impl() != AttentionImpl::Own &&
        cudnn_attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, impl() == AttentionImpl::Cudnn, workspace,
                                 ws_floats(B, T, C, NH)))
      return;
    return flash_attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, drop, workspace);
  }
  backward(dqkv, dout, qkv, lse, B, T, C, NH, drop, workspace);
}

}  // namespace parallm::kernels::cuda
