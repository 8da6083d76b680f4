// Residual add, in-place add and dropout on the GPU: grid-stride elementwise
// kernels. Dropout draws the same Philox numbers as the CPU (common.cuh), so a
// mask depends only on (seed, stream, base + i), never on the launch shape.
#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void add_kernel(float* acc, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    acc[i] += x[i];
}

__global__ void dropout_kernel(float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                               uint64_t base) {
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = dropout_keep(p, seed, rng_stream, base + static_cast<uint64_t>(i)) ? inp[i] * scale : 0.0f;
}
}  // namespace

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  residual_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(out, a, b, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.residual_forward");
}

void add_inplace(float* acc, const float* x, int64_t n) {
  if (n <= 0) return;
  add_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(acc, x, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.add_inplace");
}

void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                     uint64_t base) {
  if (n <= 0) return;
  dropout_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(out, inp, n, p, seed, rng_stream, base);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.dropout_forward");
}

void dropout_backward(float* dinp, const float* dout, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                      uint64_t base) {
  // The same mask and scale applied to the incoming gradient.
  dropout_forward(dinp, dout, n, p, seed, rng_stream, base);
}

}  // namespace parallm::kernels::cuda
