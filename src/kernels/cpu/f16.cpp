// Rounding to binary16 for the CPU's emulated fp16 products (f16.h).
#include "kernels/cpu/f16.h"

#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>

#include "core/allocator.h"
#include "core/error.h"
#include "core/profiler.h"

namespace parallm::kernels::cpu {

namespace {
// Software binary16 rounding (nearest even), for CPUs without F16C and for the tail.
float round_one(float x) {
  if (!std::isfinite(x)) return x;
  const float a = std::fabs(x);
  if (a >= 65520.0f) return std::copysign(INFINITY, x);  // half way past 65504 rounds up to infinity
  if (a < 0x1p-24f * 0.5f) return std::copysign(0.0f, x);
  int e = 0;
  std::frexp(a, &e);                     // a = m 2^e, m in [0.5, 1)
  const int exp = std::max(e - 1, -14);  // binary16's exponent (subnormals share 2^-14's spacing)
  const float ulp = std::ldexp(1.0f, exp - 10);
  return std::copysign(std::nearbyint(a / ulp) * ulp, x);  // the default rounding mode: nearest even
}

__attribute__((target("f16c,avx"))) void round_f16c(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = round_one(src[i]);
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

struct Scratch {
  std::array<Array<float>, 4> slot;
};
}  // namespace

void round_to_f16(float* dst, const float* src, int64_t n) {
  if (has_f16c()) {
    constexpr int64_t kBlock = int64_t{1} << 16;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n; b += kBlock) round_f16c(dst + b, src + b, std::min(kBlock, n - b));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = round_one(src[i]);
}

void round_to_f16(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  if (ld == cols) return round_to_f16(dst, src, rows * cols);
  for (int64_t r = 0; r < rows; ++r) round_to_f16(dst + r * cols, src + r * ld, cols);
}

float* lowp_scratch(int slot, int64_t n) {
  static Scratch s;
  PARALLM_CHECK(slot >= 0 && slot < static_cast<int>(s.slot.size()), InternalError, "kernels.lowp_scratch",
                "slot {} out of range", slot);
  Array<float>& a = s.slot[static_cast<size_t>(slot)];
  if (static_cast<int64_t>(a.size()) < n) a = Array<float>(static_cast<size_t>(n), MemCategory::Scratch);
  return a.data();
}

}  // namespace parallm::kernels::cpu
