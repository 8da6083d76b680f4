// Optimized embedding: forward by rows in parallel; backward by blocks of
// columns (dwte) and by positions (dwpe), each summed in row order, so there
// are no atomics and the result is the same for any thread count.
#include "kernels/embedding.h"

#include <algorithm>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
PARALLM_CLONES void add2(float* out, const float* a, const float* b, int64_t C) {
  for (int64_t c = 0; c < C; ++c) out[c] = a[c] + b[c];
}
PARALLM_CLONES void copy(float* out, const float* a, int64_t C) {
  for (int64_t c = 0; c < C; ++c) out[c] = a[c];
}
PARALLM_CLONES void acc(float* dst, const float* src, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] += src[c];
}
}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                       int64_t C) {
  PARALLM_PROFILE("embedding_forward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * T; ++r) {
    const float* e = wte + static_cast<int64_t>(tokens[r]) * C;
    if (wpe)
      add2(out + r * C, e, wpe + (r % T) * C, C);
    else
      copy(out + r * C, e, C);  // no position table (rotary models)
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                        int64_t C) {
  PARALLM_PROFILE("embedding_backward");
  const int64_t kCols = 64;
  const int64_t nblk = (C + kCols - 1) / kCols;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t blk = 0; blk < nblk; ++blk) {
      int64_t c0 = blk * kCols, w = std::min(kCols, C - c0);
      for (int64_t r = 0; r < B * T; ++r) acc(dwte + static_cast<int64_t>(tokens[r]) * C + c0, dout + r * C + c0, w);
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < (dwpe ? T : 0); ++t)
      for (int64_t b = 0; b < B; ++b) acc(dwpe + t * C, dout + (b * T + t) * C, C);
  }
}

}  // namespace parallm::kernels::cpu
