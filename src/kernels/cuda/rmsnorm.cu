// RMSNorm on the GPU: one warp per row for the statistics, the output and
// dinp; dweight by deterministic column sums (per-chunk partial sums, then
// the chunks added in order), so every run gives the same bits. Templated on
// the element type (float, or bf16 with fp32 statistics and weight gradients).
#include "core/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/rmsnorm.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kWarpsPerBlock = 8;
constexpr int kRowsPerChunk = 256;

template <class T>
__global__ void rms_forward(T* out, float* rstd, const T* inp, const T* w, int64_t N, int64_t C, float eps) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float ss = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const float v = to_f(x[c]);
    ss += v * v;
  }
  const float r = rsqrtf(warp_sum(ss) / static_cast<float>(C) + eps);
  for (int64_t c = lane; c < C; c += 32) out[row * C + c] = from_f<T>(to_f(w[c]) * (to_f(x[c]) * r));
  if (lane == 0) rstd[row] = r;
}

template <class T>
__global__ void rms_backward_dinp(T* dinp, const T* dout, const T* inp, const T* w, const float* rstd, int64_t N,
                                  int64_t C) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  float dot = 0;
  for (int64_t c = lane; c < C; c += 32) dot += to_f(dy[c]) * to_f(w[c]) * to_f(x[c]);
  const float r = rstd[row], k = r * r * r * warp_sum(dot) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += 32)
    dinp[row * C + c] = from_f<T>(to_f(dinp[row * C + c]) + r * to_f(dy[c]) * to_f(w[c]) - to_f(x[c]) * k);
}

// partial[chunk][c] = sum over the chunk's rows of dout * x * r.
template <class T>
__global__ void rms_backward_partial(float* partial, const T* dout, const T* inp, const float* rstd, int64_t N,
                                     int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, chunk = blockIdx.y;
  if (c >= C) return;
  const int64_t r0 = chunk * kRowsPerChunk, r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  float a = 0;
  for (int64_t n = r0; n < r1; ++n) a += to_f(dout[n * C + c]) * (to_f(inp[n * C + c]) * rstd[n]);
  partial[chunk * C + c] = a;
}

__global__ void rms_backward_final(float* dw, const float* partial, int64_t chunks, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float a = 0;
  for (int64_t k = 0; k < chunks; ++k) a += partial[k * C + c];
  dw[c] += a;
}

template <class T>
void rms_fwd(T* out, float* rstd, const T* inp, const T* w, int64_t N, int64_t C, float eps) {
  if (N <= 0) return;
  rms_forward<<<blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream()>>>(out, rstd, inp, w, N, C, eps);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.rmsnorm_forward");
}

template <class T>
void rms_bwd(T* dinp, float* dw, const T* dout, const T* inp, const T* w, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0) return;
  rms_backward_dinp<<<blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream()>>>(dinp, dout, inp, w, rstd, N,
                                                                                         C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.rmsnorm_backward");
  const int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  gpu::DeviceBuffer partial(static_cast<size_t>(chunks * C) * sizeof(float), MemCategory::Scratch);
  dim3 grid(blocks_for(C, 128), static_cast<unsigned>(chunks));
  rms_backward_partial<<<grid, 128, 0, stream()>>>(partial.as<float>(), dout, inp, rstd, N, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.rmsnorm_backward");
  rms_backward_final<<<blocks_for(C, 128), 128, 0, stream()>>>(dw, partial.as<float>(), chunks, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.rmsnorm_backward");
}
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
  rms_fwd(out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_forward(bfloat16* out, float* rstd, const bfloat16* inp, const bfloat16* weight, int64_t N, int64_t C,
                     float eps) {
  rms_fwd(out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
  rms_bwd(dinp, dweight, dout, inp, weight, rstd, N, C);
}
void rmsnorm_backward(bfloat16* dinp, float* dweight, const bfloat16* dout, const bfloat16* inp, const bfloat16* weight,
                      const float* rstd, int64_t N, int64_t C) {
  rms_bwd(dinp, dweight, dout, inp, weight, rstd, N, C);
}

}  // namespace parallm::kernels::cuda
