// The numeric detector's statistics (kernels/stats.h) on the GPU: one tiny
// kernel resets the result, then a grid-stride kernel reduces each block
// (warp shuffles, then one warp over the warps' results) and merges it into
// the result with atomics: min and max of non-negative floats as their bit
// patterns (ordered like the values), counts as 64-bit sums. Exact, so the
// order of the blocks does not matter. Nothing waits for the GPU.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/stats.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;
constexpr unsigned kInfBits = 0x7f800000u;

__global__ void stats_reset(AbsStats* out) {
  out->abs_min = __uint_as_float(kInfBits);
  out->abs_max = 0.0f;
  out->inf = 0;
  out->nan = 0;
}

__device__ __forceinline__ void warp_merge(float& mn, float& mx, unsigned long long& inf, unsigned long long& nan) {
  for (int o = 16; o > 0; o >>= 1) {
    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    inf += __shfl_xor_sync(0xffffffffu, inf, o);
    nan += __shfl_xor_sync(0xffffffffu, nan, o);
  }
}

template <class T>
__global__ void stats_kernel(AbsStats* out, const T* x, int64_t n) {
  float mn = __uint_as_float(kInfBits), mx = 0.0f;
  unsigned long long inf = 0, nan = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float a = fabsf(to_f(x[i]));
    if (isnan(a)) {
      ++nan;
    } else if (isinf(a)) {
      ++inf;
    } else {
      if (a > 0.0f) mn = fminf(mn, a);
      mx = fmaxf(mx, a);
    }
  }
  warp_merge(mn, mx, inf, nan);
  __shared__ float smn[32], smx[32];
  __shared__ unsigned long long sinf[32], snan[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) {
    smn[warp] = mn;
    smx[warp] = mx;
    sinf[warp] = inf;
    snan[warp] = nan;
  }
  __syncthreads();
  if (warp != 0) return;
  mn = lane < warps ? smn[lane] : __uint_as_float(kInfBits);
  mx = lane < warps ? smx[lane] : 0.0f;
  inf = lane < warps ? sinf[lane] : 0ull;
  nan = lane < warps ? snan[lane] : 0ull;
  warp_merge(mn, mx, inf, nan);
  if (lane != 0) return;
  atomicMin(reinterpret_cast<unsigned*>(&out->abs_min), __float_as_uint(mn));
  atomicMax(reinterpret_cast<unsigned*>(&out->abs_max), __float_as_uint(mx));
  if (inf) atomicAdd(reinterpret_cast<unsigned long long*>(&out->inf), inf);
  if (nan) atomicAdd(reinterpret_cast<unsigned long long*>(&out->nan), nan);
}

template <class T>
void launch(AbsStats* out, const T* x, int64_t n) {
  stats_reset<<<1, 1, 0, stream()>>>(out);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.abs_stats");
  if (n <= 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;  // at most kMaxBlocks, each merged with 4 atomics
  stats_kernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kThreads, 0, stream()>>>(out, x, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.abs_stats");
}
}  // namespace

void abs_stats(AbsStats* out, const float* x, int64_t n) {
  launch(out, x, n);
}
void abs_stats(AbsStats* out, const bfloat16* x, int64_t n) {
  launch(out, x, n);
}

}  // namespace parallm::kernels::cuda
