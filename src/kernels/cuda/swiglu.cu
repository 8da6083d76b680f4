// SwiGLU's gate on the GPU: elementwise, grid-stride, fp32 arithmetic on
// float or bf16 elements.
#include "kernels/cuda/common.cuh"
#include "kernels/swiglu.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;

template <class T>
__global__ void swiglu_fwd(T* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f(gate[i]);
    out[i] = from_f<T>(g / (1.0f + expf(-g)) * to_f(up[i]));
  }
}

template <class T>
__global__ void swiglu_bwd(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f(gate[i]), u = to_f(up[i]), d = to_f(dout[i]);
    const float s = 1.0f / (1.0f + expf(-g));
    dgate[i] = from_f<T>(d * u * s * (1.0f + g * (1.0f - s)));
    dup[i] = from_f<T>(d * g * s);
  }
}

template <class T>
void fwd(T* out, const T* gate, const T* up, int64_t n) {
  if (n <= 0) return;
  swiglu_fwd<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(out, gate, up, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.swiglu_forward");
}
template <class T>
void bwd(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  if (n <= 0) return;
  swiglu_bwd<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(dgate, dup, dout, gate, up, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.swiglu_backward");
}
}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  fwd(out, gate, up, n);
}
void swiglu_forward(bfloat16* out, const bfloat16* gate, const bfloat16* up, int64_t n) {
  fwd(out, gate, up, n);
}
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  bwd(dgate, dup, dout, gate, up, n);
}
void swiglu_backward(bfloat16* dgate, bfloat16* dup, const bfloat16* dout, const bfloat16* gate, const bfloat16* up,
                     int64_t n) {
  bwd(dgate, dup, dout, gate, up, n);
}

}  // namespace parallm::kernels::cuda
