// AdamW and the global-norm reduction on the GPU. The update follows the CPU
// contract (decoupled decay first, bias-corrected moments, eps after the
// sqrt). sum_squares is deterministic: a fixed grid of blocks each sums a
// fixed set of elements in double, then one block adds the partials in order.
#include <cmath>

#include "core/allocator.h"
#include "kernels/adamw.h"
#include "kernels/cuda/common.cuh"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kPartials = 1024;  // blocks of the first pass: fixed, so the order of additions is too

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float decay, float grad_scale, float inv_bc1, float inv_sqrt_bc2) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float g = grad[i] * grad_scale;
    float w = param[i] * (1.0f - lr * decay);
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = w - lr * inv_bc1 * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

__global__ void sumsq_partial(double* partial, const float* x, int64_t n) {
  __shared__ double sh[32];
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    s += static_cast<double>(x[i]) * x[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sumsq_final(double* out, const double* partial, int n) {
  __shared__ double sh[32];
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *out = s;
}
}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p) {
  if (n <= 0) return;
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  adamw_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(
      param, grad, m, v, n, p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale, static_cast<float>(1.0 / bc1),
      static_cast<float>(1.0 / std::sqrt(bc2)));
  PARALLM_CUDA_LAUNCHED("kernels.cuda.adamw_step");
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  gpu::DeviceBuffer buf((kPartials + 1) * sizeof(double), MemCategory::Scratch);
  double* partial = buf.as<double>();
  sumsq_partial<<<kPartials, kThreads, 0, stream()>>>(partial, x, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.sum_squares");
  sumsq_final<<<1, 1024, 0, stream()>>>(partial + kPartials, partial, kPartials);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.sum_squares");
  double r = 0;
  gpu::memcpy_d2h(&r, partial + kPartials, sizeof(double));
  return r;
}

}  // namespace parallm::kernels::cuda
