// The numeric detector's statistics (kernels/stats.h) on the host: the
// reference, one plain loop per value, and the optimized version, chunks in
// parallel, each a branch-free loop the compiler vectorizes (a magnitude is
// finite when it is <= FLT_MAX, which NaN never is; NaN alone differs from
// itself), the chunks' results combined (exact in any order).
#include "kernels/stats.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFinite = std::numeric_limits<float>::max();

inline float value_of(float x) {
  return x;
}
inline float value_of(bfloat16 x) {
  return bf16_to_f32(x.bits);
}

void combine(AbsStats& acc, const AbsStats& s) {
  acc.abs_min = std::min(acc.abs_min, s.abs_min);
  acc.abs_max = std::max(acc.abs_max, s.abs_max);
  acc.inf += s.inf;
  acc.nan += s.nan;
}

template <class T>
AbsStats ref_stats(const T* x, int64_t n) {
  AbsStats s{kInf, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const float v = value_of(x[i]);
    if (std::isnan(v)) {
      ++s.nan;
    } else if (std::isinf(v)) {
      ++s.inf;
    } else {
      const float a = std::fabs(v);
      if (a > 0) s.abs_min = std::min(s.abs_min, a);
      s.abs_max = std::max(s.abs_max, a);
    }
  }
  return s;
}

// One chunk, branch-free: selects instead of branches so the loop vectorizes.
template <class T>
inline __attribute__((always_inline)) AbsStats chunk_stats(const T* x, int64_t n) {
  float mn = kInf, mx = 0;
  int64_t bad = 0, nan = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(value_of(x[i]));
    const bool finite = a <= kMaxFinite;
    mn = std::min(mn, finite && a > 0 ? a : kInf);
    mx = std::max(mx, finite ? a : 0.0f);
    bad += !finite;
    nan += a != a;
  }
  return {mn, mx, bad - nan, nan};
}
PARALLM_CLONES AbsStats chunk_f32(const float* x, int64_t n) {
  return chunk_stats(x, n);
}
PARALLM_CLONES AbsStats chunk_bf16(const bfloat16* x, int64_t n) {
  return chunk_stats(x, n);
}
inline AbsStats chunk(const float* x, int64_t n) {
  return chunk_f32(x, n);
}
inline AbsStats chunk(const bfloat16* x, int64_t n) {
  return chunk_bf16(x, n);
}

template <class T>
AbsStats cpu_stats(const T* x, int64_t n) {
  PARALLM_PROFILE("abs_stats");
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) return chunks ? chunk(x, n) : AbsStats{kInf, 0, 0, 0};
  AbsStats total{kInf, 0, 0, 0};
#pragma omp parallel
  {
    AbsStats mine{kInf, 0, 0, 0};
#pragma omp for schedule(static) nowait
    for (int64_t c = 0; c < chunks; ++c) combine(mine, chunk(x + c * kChunk, std::min(kChunk, n - c * kChunk)));
#pragma omp critical(parallm_abs_stats)
    combine(total, mine);
  }
  return total;
}
}  // namespace

namespace ref {
void abs_stats(AbsStats* out, const float* x, int64_t n) {
  *out = ref_stats(x, n);
}
void abs_stats(AbsStats* out, const bfloat16* x, int64_t n) {
  *out = ref_stats(x, n);
}
}  // namespace ref

namespace cpu {
void abs_stats(AbsStats* out, const float* x, int64_t n) {
  *out = cpu_stats(x, n);
}
void abs_stats(AbsStats* out, const bfloat16* x, int64_t n) {
  *out = cpu_stats(x, n);
}
}  // namespace cpu

}  // namespace parallm::kernels
