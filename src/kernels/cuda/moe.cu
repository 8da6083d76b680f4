// Mixture-of-experts routing and token movement on the GPU (moe.h): routing
// one thread per token (the reference's arithmetic, fp32), token movement one
// block per output row with the same fixed order of sums over a token's choices.
#include "kernels/cuda/common.cuh"
#include "kernels/moe.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 128;
constexpr int kMaxE = 1024;  // model::kMaxExperts

template <class T>
__device__ float scores(float* s, const T* z, int64_t E, MoeScore kind) {
  float m = to_f(z[0]);
  for (int64_t e = 1; e < E; ++e) m = fmaxf(m, to_f(z[e]));
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += exp(static_cast<double>(to_f(z[e]) - m));
  const float lse = m + static_cast<float>(log(sum));
  for (int64_t e = 0; e < E; ++e)
    s[e] = kind == MoeScore::Softmax ? expf(to_f(z[e]) - lse) : 1.0f / (1.0f + expf(-to_f(z[e])));
  return lse;
}

template <class T>
__global__ void route_fwd(float* w, int32_t* ids, float* lse, const T* z, const T* bias, int64_t N, int64_t E,
                          int64_t K, MoeRouting r) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= N) return;
  float s[kMaxE];
  lse[t] = scores(s, z + t * E, E, r.score);
  float* wt = w + t * K;
  int32_t* it = ids + t * K;
  float sum = 0.0f;
  for (int64_t j = 0; j < K; ++j) {
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken = taken || it[i] == e;
      if (taken) continue;
      const float v = bias ? s[e] + to_f(bias[e]) : s[e];
      if (best < 0 || v > bv) {
        best = e;
        bv = v;
      }
    }
    it[j] = static_cast<int32_t>(best);
    wt[j] = s[best];
    sum += s[best];
  }
  for (int64_t j = 0; j < K; ++j) wt[j] = (r.norm ? wt[j] / sum : wt[j]) * r.scale;
}

template <class T>
__global__ void route_bwd(T* dz, const float* dw, const T* z, const int32_t* ids, const float* lse, const float* aux,
                          float z_scale, int64_t N, int64_t E, int64_t K, MoeRouting r) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= N) return;
  float s[kMaxE], ds[kMaxE];
  const T* zt = z + t * E;
  const int32_t* it = ids + t * K;
  const float* dwt = dw + t * K;
  scores(s, zt, E, r.score);
  for (int64_t e = 0; e < E; ++e) ds[e] = 0.0f;
  if (r.norm) {
    float S = 0.0f, dot = 0.0f;
    for (int64_t j = 0; j < K; ++j) S += s[it[j]];
    for (int64_t j = 0; j < K; ++j) dot += r.scale * dwt[j] * (s[it[j]] / S);
    for (int64_t j = 0; j < K; ++j) ds[it[j]] += (r.scale * dwt[j] - dot) / S;
  } else {
    for (int64_t j = 0; j < K; ++j) ds[it[j]] += r.scale * dwt[j];
  }
  if (aux && r.score == MoeScore::Softmax) {
    for (int64_t e = 0; e < E; ++e) ds[e] += aux[e];
  } else if (aux) {
    float S = 0.0f, dot = 0.0f;
    for (int64_t e = 0; e < E; ++e) S += s[e];
    for (int64_t e = 0; e < E; ++e) dot += aux[e] * (s[e] / S);
    for (int64_t e = 0; e < E; ++e) ds[e] += (aux[e] - dot) / S;
  }
  float dot = 0.0f;
  if (r.score == MoeScore::Softmax)
    for (int64_t e = 0; e < E; ++e) dot += ds[e] * s[e];
  const float c = z_scale * 2.0f * lse[t];
  for (int64_t e = 0; e < E; ++e) {
    float d = r.score == MoeScore::Softmax ? s[e] * (ds[e] - dot) : ds[e] * s[e] * (1.0f - s[e]);
    if (z_scale != 0.0f) d += c * expf(to_f(zt[e]) - lse[t]);
    dz[t * E + e] = from_f<T>(d);
  }
}

template <class T>
__global__ void gather_k(T* out, const T* in, const int32_t* src, int64_t C) {
  const int64_t i = blockIdx.x;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[i * C + c] = in[src[i] * C + c];
}

template <class T>
__global__ void combine_k(T* out, const T* y, const int32_t* slot, const float* w, int64_t K, int64_t C) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < K; ++j)
      if (slot[t * K + j] >= 0) acc += w[t * K + j] * to_f(y[slot[t * K + j] * C + c]);
    out[t * C + c] = from_f<T>(acc);
  }
}

template <class T>
__global__ void combine_bwd_k(T* dy, float* dw, const T* dout, const T* y, const int32_t* slot, const float* w,
                              int64_t K, int64_t C) {
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  for (int64_t j = 0; j < K; ++j) {
    const int32_t s = slot[t * K + j];
    float dot = 0.0f;
    if (s >= 0)
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = to_f(dout[t * C + c]);
        dy[s * C + c] = from_f<T>(w[t * K + j] * d);
        dot += d * to_f(y[s * C + c]);
      }
    dot = block_sum(dot, red);
    if (threadIdx.x == 0) dw[t * K + j] = s >= 0 ? dot : 0.0f;
    __syncthreads();
  }
}

template <class T>
__global__ void scatter_add_k(T* dx, const T* dxp, const int32_t* slot, int64_t K, int64_t C) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < K; ++j)
      if (slot[t * K + j] >= 0) acc += to_f(dxp[slot[t * K + j] * C + c]);
    dx[t * C + c] = from_f<T>(acc);
  }
}

int64_t blocks(int64_t n) {
  return (n + kThreads - 1) / kThreads;
}
}  // namespace

#define PARALLM_MOE_CUDA(T)                                                                                           \
  void moe_route_forward(float* w, int32_t* ids, float* lse, const T* z, const T* bias, int64_t N, int64_t E,         \
                         int64_t K, MoeRouting r) {                                                                   \
    if (N <= 0) return;                                                                                               \
    route_fwd<<<blocks(N), kThreads, 0, stream()>>>(w, ids, lse, z, bias, N, E, K, r);                                \
    PARALLM_CUDA_LAUNCHED("kernels.cuda.moe_route_forward");                                                          \
  }                                                                                                                   \
  void moe_route_backward(T* dz, const float* dw, const T* z, const int32_t* ids, const float* lse, const float* aux, \
                          float z_scale, int64_t N, int64_t E, int64_t K, MoeRouting r) {                             \
    if (N <= 0) return;                                                                                               \
    route_bwd<<<blocks(N), kThreads, 0, stream()>>>(dz, dw, z, ids, lse, aux, z_scale, N, E, K, r);                   \
    PARALLM_CUDA_LAUNCHED("kernels.cuda.moe_route_backward");                                                         \
  }                                                                                                                   \
  void moe_gather(T* out, const T* in, const int32_t* src, int64_t n, int64_t C) {                                    \
    if (n <= 0) return;                                                                                               \
    gather_k<<<n, kThreads, 0, stream()>>>(out, in, src, C);                                                          \
    PARALLM_CUDA_LAUNCHED("kernels.cuda.moe_gather");                                                                 \
  }                                                                                                                   \
  void moe_combine(T* out, const T* y, const int32_t* slot, const float* w, int64_t N, int64_t K, int64_t C) {        \
    if (N <= 0) return;                                                                                               \
    combine_k<<<N, kThreads, 0, stream()>>>(out, y, slot, w, K, C);                                                   \
    PARALLM_CUDA_LAUNCHED("kernels.cuda.moe_combine");                                                                \
  }                                                                                                                   \
  void moe_combine_backward(T* dy, float* dw, const T* dout, const T* y, const int32_t* slot, const float* w,         \
                            int64_t N, int64_t K, int64_t C) {                                                        \
    if (N <= 0) return;                                                                                               \
    combine_bwd_k<<<N, kThreads, 0, stream()>>>(dy, dw, dout, y, slot, w, K, C);                                      \
    PARALLM_CUDA_LAUNCHED("kernels.cuda.moe_combine_backward");                                                       \
  }                                                                                                                   \
  void moe_scatter_add(T* dx, const T* dxp, const int32_t* slot, int64_t N, int64_t K, int64_t C) {                   \
    if (N <= 0) return;                                                                                               \
    scatter_add_k<<<N, kThreads, 0, stream()>>>(dx, dxp, slot, K, C);                                                 \
    PARALLM_CUDA_LAUNCHED("kernels.cuda.moe_scatter_add");                                                            \
  }
PARALLM_MOE_CUDA(float)
PARALLM_MOE_CUDA(bfloat16)
#undef PARALLM_MOE_CUDA

}  // namespace parallm::kernels::cuda
