// Causal self-attention on the GPU, fp32, built from cuBLAS batched GEMMs
// over the heads of one sequence at a time plus two row kernels:
//   forward:  S = Q K^T;  row kernel: lse, P = exp(scale*S - lse) (dropped);  O = P V
//   backward: S = Q K^T, dPd = dO V^T;  row kernel: P from lse, dP = dPd*mask,
//             D = sum P dP, dS = scale * P (dP - D), Pd = P*mask;
//             dV = Pd^T dO, dQ = dS K, dK = dS^T Q
// The workspace holds two [NH, T, T] matrices for the current sequence (the
// full-score path the CPU reference also takes); only lse is kept between
// forward and backward. The fused flash-style kernel for bf16 replaces this
// on the fast path.
#include <cfloat>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/matmul.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// One block per row (h, i) of one sequence b. S is overwritten with P (dropped, rescaled), zero above the diagonal.
__global__ void softmax_forward(float* S, float* lse, int64_t T, float scale, AttnDropout drop, int64_t bh0) {
  __shared__ float sh[32];
  const int64_t h = blockIdx.x / T, i = blockIdx.x % T;
  float* s = S + (h * T + i) * T;
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
    s[j] = p;
  }
}

// One block per row: S in (scores), dP in (dO V^T); out: S <- P*mask, dP <- scale * P * (dP*mask - D).
__global__ void softmax_backward(float* S, float* dP, const float* lse, int64_t T, float scale, AttnDropout drop,
                                 int64_t bh0) {
  __shared__ double sh[32];
  const int64_t h = blockIdx.x / T, i = blockIdx.x % T;
  float* s = S + (h * T + i) * T;
  float* g = dP + (h * T + i) * T;
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
    if (j <= i) {
      float p = expf(s[j] * scale - l);
      float mask = drop.p > 0 ? (dropout_keep(drop.p, drop.seed, drop.stream, row + j) ? keep_scale : 0.0f) : 1.0f;
      g[j] = scale * p * (g[j] * mask - D);
      s[j] = p * mask;
    } else {
      g[j] = 0.0f;
      s[j] = 0.0f;
    }
  }
}
}  // namespace

int64_t attention_workspace_floats(int64_t, int64_t T, int64_t, int64_t NH, int) {
  return 2 * NH * T * T;
}

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       AttnDropout drop, float* workspace) {
  const int64_t HS = C / NH, C3 = 3 * C, TT = T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* S = workspace;
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv + b * T * C3;
    sgemm_strided_batched(false, true, T, T, HS, 1.0f, q, C3, HS, q + C, C3, HS, 0.0f, S, T, TT, NH);
    softmax_forward<<<static_cast<unsigned>(NH * T), kThreads, 0, stream()>>>(S, lse + b * NH * T, T, scale, drop,
                                                                              drop.bh_base + b * NH);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.attention_forward");
    sgemm_strided_batched(false, false, T, HS, T, 1.0f, S, T, TT, q + 2 * C, C3, HS, 0.0f, out + b * T * C, C, HS, NH);
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float*, const float* lse, int64_t B,
                        int64_t T, int64_t C, int64_t NH, AttnDropout drop, float* workspace) {
  const int64_t HS = C / NH, C3 = 3 * C, TT = T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* S = workspace;
  float* dP = workspace + NH * TT;
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv + b * T * C3;
    const float* dy = dout + b * T * C;
    float* dq = dqkv + b * T * C3;
    sgemm_strided_batched(false, true, T, T, HS, 1.0f, q, C3, HS, q + C, C3, HS, 0.0f, S, T, TT, NH);
    sgemm_strided_batched(false, true, T, T, HS, 1.0f, dy, C, HS, q + 2 * C, C3, HS, 0.0f, dP, T, TT, NH);
    softmax_backward<<<static_cast<unsigned>(NH * T), kThreads, 0, stream()>>>(S, dP, lse + b * NH * T, T, scale, drop,
                                                                               drop.bh_base + b * NH);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.attention_backward");
    sgemm_strided_batched(true, false, T, HS, T, 1.0f, S, T, TT, dy, C, HS, 0.0f, dq + 2 * C, C3, HS, NH);  // dV
    sgemm_strided_batched(false, false, T, HS, T, 1.0f, dP, T, TT, q + C, C3, HS, 0.0f, dq, C3, HS, NH);    // dQ
    sgemm_strided_batched(true, false, T, HS, T, 1.0f, dP, T, TT, q, C3, HS, 0.0f, dq + C, C3, HS, NH);     // dK
  }
}

}  // namespace parallm::kernels::cuda
