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

struct AdamWArgs {
  float lr, beta1, beta2, eps, decay, grad_scale, inv_bc1, inv_sqrt_bc2;
};

__device__ __forceinline__ void adamw_one(float& w, float g, float& m, float& v, const AdamWArgs& a) {
  g *= a.grad_scale;
  const float wd = w * (1.0f - a.lr * a.decay);
  m = a.beta1 * m + (1.0f - a.beta1) * g;
  v = a.beta2 * v + (1.0f - a.beta2) * g * g;
  w = wd - a.lr * a.inv_bc1 * m / (sqrtf(v) * a.inv_sqrt_bc2 + a.eps);
}

// Elements [0, 4 nv) as float4 (nv = 0 where a pointer is not 16-byte aligned), the rest one by one.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, int64_t nv, AdamWArgs a) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, start = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t i = start; i < nv; i += stride) {
    float4 w = reinterpret_cast<float4*>(param)[i], mi = reinterpret_cast<float4*>(m)[i],
           vi = reinterpret_cast<float4*>(v)[i];
    const float4 g = reinterpret_cast<const float4*>(grad)[i];
    adamw_one(w.x, g.x, mi.x, vi.x, a);
    adamw_one(w.y, g.y, mi.y, vi.y, a);
    adamw_one(w.z, g.z, mi.z, vi.z, a);
    adamw_one(w.w, g.w, mi.w, vi.w, a);
    reinterpret_cast<float4*>(param)[i] = w;
    reinterpret_cast<float4*>(m)[i] = mi;
    reinterpret_cast<float4*>(v)[i] = vi;
  }
  for (int64_t i = 4 * nv + start; i < n; i += stride) adamw_one(param[i], grad[i], m[i], v[i], a);
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
  const AdamWArgs a{p.lr,
                    p.beta1,
                    p.beta2,
                    p.eps,
                    p.weight_decay,
                    p.grad_scale,
                    static_cast<float>(1.0 / bc1),
                    static_cast<float>(1.0 / std::sqrt(bc2))};
  const int64_t nv = aligned16(param, grad, m, v) ? n / 4 : 0;
  adamw_kernel<<<capped_blocks(nv > 0 ? nv : n, kThreads), kThreads, 0, stream()>>>(param, grad, m, v, n, nv, a);
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
