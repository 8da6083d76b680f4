// GELU forward and backward on the GPU, exact (erf) or tanh, elementwise, on
// float or bf16 elements (fp32 arithmetic), read and written 16 bytes at a time.
#include "kernels/cuda/common.cuh"
#include "kernels/gelu.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

__device__ __forceinline__ float gelu_value(float x, bool exact) {
  // Written without 1 + erf / 1 + tanh, which cancel for negative x: erfc and a sigmoid stay accurate.
  return exact ? 0.5f * x * erfcf(-x * kInvSqrt2)
               : x / (1.0f + expf(-2.0f * kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_grad(float x, bool exact) {
  if (exact) return 0.5f * erfcf(-x * kInvSqrt2) + x * expf(-0.5f * x * x) * kInvSqrt2Pi;
  // s = sigmoid(2u) = (1 + tanh u) / 2, and 1 - tanh^2 u = 4 s (1 - s).
  float s = 1.0f / (1.0f + expf(-2.0f * kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  return s + 2.0f * x * s * (1.0f - s) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
}

// Elements [0, nv * V) as 16-byte vectors (nv = 0 where a pointer is not
// 16-byte aligned), the rest one by one.
template <class T>
__global__ void gelu_fwd(T* out, const T* inp, int64_t n, int64_t nv, bool exact) {
  constexpr int V = Vec16<T>::n;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, start = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t i = start; i < nv; i += stride) {
    Vec16<T> x = load16(inp + i * V), y;
    for (int k = 0; k < V; ++k) y.set(k, gelu_value(x.get(k), exact));
    store16(out + i * V, y);
  }
  for (int64_t i = nv * V + start; i < n; i += stride) out[i] = from_f<T>(gelu_value(to_f(inp[i]), exact));
}

template <class T>
__global__ void gelu_bwd(T* dinp, const T* inp, const T* dout, int64_t n, int64_t nv, bool exact) {
  constexpr int V = Vec16<T>::n;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, start = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t i = start; i < nv; i += stride) {
    Vec16<T> x = load16(inp + i * V), dy = load16(dout + i * V), dx;
    for (int k = 0; k < V; ++k) dx.set(k, gelu_grad(x.get(k), exact) * dy.get(k));
    store16(dinp + i * V, dx);
  }
  for (int64_t i = nv * V + start; i < n; i += stride)
    dinp[i] = from_f<T>(gelu_grad(to_f(inp[i]), exact) * to_f(dout[i]));
}

template <class T>
void fwd(T* out, const T* inp, int64_t n, GeluKind kind) {
  if (n <= 0) return;
  const int64_t nv = aligned16(out, inp) ? n / Vec16<T>::n : 0;
  gelu_fwd<<<capped_blocks(nv > 0 ? nv : n, kThreads), kThreads, 0, stream()>>>(out, inp, n, nv,
                                                                                kind == GeluKind::Exact);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.gelu_forward");
}

template <class T>
void bwd(T* dinp, const T* inp, const T* dout, int64_t n, GeluKind kind) {
  if (n <= 0) return;
  const int64_t nv = aligned16(dinp, inp, dout) ? n / Vec16<T>::n : 0;
  gelu_bwd<<<capped_blocks(nv > 0 ? nv : n, kThreads), kThreads, 0, stream()>>>(dinp, inp, dout, n, nv,
                                                                                kind == GeluKind::Exact);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.gelu_backward");
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, GeluKind kind) {
  fwd(out, inp, n, kind);
}
void gelu_forward(bfloat16* out, const bfloat16* inp, int64_t n, GeluKind kind) {
  fwd(out, inp, n, kind);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluKind kind) {
  bwd(dinp, inp, dout, n, kind);
}
void gelu_backward(bfloat16* dinp, const bfloat16* inp, const bfloat16* dout, int64_t n, GeluKind kind) {
  bwd(dinp, inp, dout, n, kind);
}

}  // namespace parallm::kernels::cuda
