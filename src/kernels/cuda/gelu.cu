// GELU forward and backward on the GPU, exact (erf) or tanh, elementwise, on
// float or bf16 elements (fp32 arithmetic).
#include "kernels/cuda/common.cuh"
#include "kernels/gelu.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <class T>
__global__ void gelu_fwd(T* out, const T* inp, int64_t n, bool exact) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    // Written without 1 + erf / 1 + tanh, which cancel for negative x: erfc and a sigmoid stay accurate.
    float x = to_f(inp[i]);
    out[i] = from_f<T>(exact ? 0.5f * x * erfcf(-x * kInvSqrt2)
                             : x / (1.0f + expf(-2.0f * kSqrt2OverPi * (x + 0.044715f * x * x * x))));
  }
}

template <class T>
__global__ void gelu_bwd(T* dinp, const T* inp, const T* dout, int64_t n, bool exact) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float x = to_f(inp[i]), g;
    if (exact) {
      g = 0.5f * erfcf(-x * kInvSqrt2) + x * expf(-0.5f * x * x) * kInvSqrt2Pi;
    } else {
      // s = sigmoid(2u) = (1 + tanh u) / 2, and 1 - tanh^2 u = 4 s (1 - s).
      float s = 1.0f / (1.0f + expf(-2.0f * kSqrt2OverPi * (x + 0.044715f * x * x * x)));
      g = s + 2.0f * x * s * (1.0f - s) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    }
    dinp[i] = from_f<T>(g * to_f(dout[i]));
  }
}

template <class T>
void fwd(T* out, const T* inp, int64_t n, GeluKind kind) {
  if (n <= 0) return;
  gelu_fwd<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(out, inp, n, kind == GeluKind::Exact);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.gelu_forward");
}

template <class T>
void bwd(T* dinp, const T* inp, const T* dout, int64_t n, GeluKind kind) {
  if (n <= 0) return;
  gelu_bwd<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(dinp, inp, dout, n, kind == GeluKind::Exact);
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
