// Shared pieces of the CUDA kernels: the compute stream, launch helpers, fp32
// loads and stores of float or bf16 elements, warp and block reductions, and dropout's keep decision from the Philox
// shared with the CPU (core/philox.h), so GPU masks equal the CPU's.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/dtype.h"
#include "core/gpu.h"
#include "core/philox.h"

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

// Element loads and stores in fp32 arithmetic: kernels templated on the
// storage type (float or bfloat16) read with to_f and write with from_f<T>.
__device__ __forceinline__ float to_f(float x) {
  return x;
}
__device__ __forceinline__ float to_f(bfloat16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}
template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bfloat16 from_f<bfloat16>(float x) {
  return bfloat16{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
}

// 16 bytes of float (4) or bf16 (8) elements, loaded and stored at once: the
// memory-bound kernels read and write through these where the pointers are
// 16-byte aligned (aligned16), and element by element for the rest.
template <class T>
struct Vec16 {
  static constexpr int n = 16 / static_cast<int>(sizeof(T));
  uint4 raw;
  __device__ __forceinline__ float get(int i) const { return to_f(reinterpret_cast<const T*>(&raw)[i]); }
  __device__ __forceinline__ void set(int i, float v) { reinterpret_cast<T*>(&raw)[i] = from_f<T>(v); }
};
template <class T>
__device__ __forceinline__ Vec16<T> load16(const T* p) {
  Vec16<T> v;
  v.raw = *reinterpret_cast<const uint4*>(p);
  return v;
}
template <class T>
__device__ __forceinline__ void store16(T* p, const Vec16<T>& v) {
  *reinterpret_cast<uint4*>(p) = v.raw;
}
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
template <class... P>
bool aligned16(const void* p, P... rest) {
  return aligned16(p) && aligned16(rest...);
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

// As kernels::dropout_keep: the shared Philox of core/philox.h.
__device__ __forceinline__ bool dropout_keep(float p, uint64_t seed, uint64_t stream, uint64_t g) {
  return dropout_keep_at(p, seed, stream, g);
}

}  // namespace parallm::kernels::cuda
