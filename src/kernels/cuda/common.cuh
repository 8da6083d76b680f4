// Shared pieces of the CUDA kernels: the compute stream, launch helpers, warp
// and block reductions, and a device Philox4x32-10 that gives exactly the
// numbers of core/rng.cpp, so dropout masks on the GPU equal the CPU's.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/gpu.h"

namespace parallm::kernels::cuda {

inline cudaStream_t stream() {
  return static_cast<cudaStream_t>(gpu::stream());
}

inline unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Grid-stride loops cap the grid here; the kernels loop over the rest.
inline unsigned capped_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. `shared` holds 32 values.
template <class T>
__device__ T block_sum(T v, T* shared) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : T(0);
  return warp_sum(r);
}

// Maximum over the block, every thread gets it; `shared` holds 32 values.
__device__ __forceinline__ float block_max(float v, float* shared) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : -3.402823466e+38f;
  return warp_max(r);
}

struct Philox4 {
  uint32_t v[4];
};

__device__ __forceinline__ Philox4 philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0 = __umulhi(M0, c0), lo0 = M0 * c0;
    uint32_t hi1 = __umulhi(M1, c2), lo1 = M1 * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += W0;
    k1 += W1;
  }
  return {{c0, c1, c2, c3}};
}

// As kernels::dropout_keep: element g uses lane g % 4 of Philox block g / 4.
__device__ __forceinline__ bool dropout_keep(float p, uint64_t seed, uint64_t stream, uint64_t g) {
  Philox4 r = philox4x32(seed, stream, g / 4);
  float u = static_cast<float>(r.v[g % 4] >> 8) * (1.0f / 16777216.0f);
  return u >= p;
}

}  // namespace parallm::kernels::cuda
