// Deterministic column sums (see reduce.h): a [chunks, C] partial buffer from
// the caching allocator, then one thread per column adds the chunks in order.
#include "core/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kRowsPerChunk = 256;
constexpr int kTy = 8;  // rows handled at once by a block of 32 x kTy threads

template <class T>
__global__ void colsum_partial(float* partial, const T* x, int64_t N, int64_t C) {
  __shared__ float sh[kTy][33];
  int64_t c = blockIdx.x * 32 + threadIdx.x;
  int64_t r0 = blockIdx.y * int64_t{kRowsPerChunk};
  int64_t r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  float s = 0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTy) s += to_f(x[r * C + c]);
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0;
    for (int i = 0; i < kTy; ++i) t += sh[i][threadIdx.x];
    partial[blockIdx.y * C + c] = t;
  }
}

__global__ void colsum_final(float* acc, const float* partial, int64_t chunks, int64_t C) {
  int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * C + c];
  acc[c] += s;
}
}  // namespace

int64_t colsum_chunks(int64_t N) {
  return (N + kRowsPerChunk - 1) / kRowsPerChunk;
}

namespace {
template <class T>
void colsum(float* acc, const T* x, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  int64_t chunks = colsum_chunks(N);
  gpu::DeviceBuffer partial(static_cast<size_t>(chunks * C) * sizeof(float), MemCategory::Scratch);
  dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(chunks));
  colsum_partial<<<grid, dim3(32, kTy), 0, stream()>>>(partial.as<float>(), x, N, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.colsum");
  colsum_final<<<blocks_for(C, 256), 256, 0, stream()>>>(acc, partial.as<float>(), chunks, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.colsum");
}
}  // namespace

void colsum_accumulate(float* acc, const float* x, int64_t N, int64_t C) {
  colsum(acc, x, N, C);
}
void colsum_accumulate(float* acc, const bfloat16* x, int64_t N, int64_t C) {
  colsum(acc, x, N, C);
}

}  // namespace parallm::kernels::cuda
