// FP8 rounding and row scaling for the CPU's emulated FP8 products (fp8.h),
// and the thread's FP8 context (kernels/fp8.h).
#include "kernels/cpu/fp8.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels {

Fp8Context& fp8_context() {
  thread_local Fp8Context c;
  return c;
}

namespace cpu {

namespace {
// Nearest-even rounding to M mantissa bits with smallest normal exponent EMIN (below it, multiples of
// 2^(EMIN - M)), saturating at MAX. The fp32 bits of a normal value are rounded in place: adding half an ulp
// (less one, plus the kept bit's parity) carries into the exponent where the mantissa overflows.
template <int M, int EMIN>
inline float round_bits(float x, float max) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u;
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) return x;  // inf, NaN
  float r;
  if (u < (static_cast<uint32_t>(EMIN + 127) << 23)) {
    constexpr float up = static_cast<float>(1u << (M - EMIN)), down = 1.0f / up;  // exact powers of two
    r = std::nearbyint(std::bit_cast<float>(u) * up) * down;
  } else {
    constexpr int shift = 23 - M;
    u += ((1u << (shift - 1)) - 1) + ((u >> shift) & 1u);
    u &= ~((1u << shift) - 1);
    r = std::bit_cast<float>(u);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(std::min(r, max)) | sign);
}

constexpr float kE4M3Max = 448.0f, kE5M2Max = 57344.0f;

PARALLM_CLONES void row_amax(float* amax, const float* src, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* s = src + r * cols;
    float m = 0.0f;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, std::fabs(s[j]));
    bool finite = true;
    for (int64_t j = 0; j < cols; ++j) finite &= std::isfinite(s[j]);
    amax[r] = finite ? m : INFINITY;
  }
}

// The scale's exponent: the least e with amax 2^-e <= max (kept where 2^e and 2^-e are normal floats).
int scale_exponent(float amax, float max) {
  int e = 0;
  std::frexp(amax / max, &e);
  e = std::clamp(e, -120, 120);
  while (e > -120 && std::ldexp(amax, -(e - 1)) <= max) --e;
  while (std::ldexp(amax, -e) > max) ++e;
  return e;
}

template <int M, int EMIN>
void quantize_rows(float* dst, const float* src, int64_t rows, int64_t cols, const float* amax, float max) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * cols;
    float* d = dst + r * cols;
    if (!(amax[r] > 0.0f) || !std::isfinite(amax[r])) {
      std::copy(s, s + cols, d);
      continue;
    }
    const int e = scale_exponent(amax[r], max);
    const float down = std::ldexp(1.0f, -e), up = std::ldexp(1.0f, e);
    for (int64_t j = 0; j < cols; ++j) d[j] = round_bits<M, EMIN>(s[j] * down, max) * up;
  }
}
}  // namespace

float fp8_max(Fp8Format f) {
  return f == Fp8Format::E4M3 ? kE4M3Max : kE5M2Max;
}

float round_fp8(float x, Fp8Format f) {
  return f == Fp8Format::E4M3 ? round_bits<3, -6>(x, kE4M3Max) : round_bits<2, -14>(x, kE5M2Max);
}

void round_to_bf16_values(float* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = std::bit_cast<uint32_t>(src[i]);
    if ((u & 0x7fffffffu) < 0x7f800000u) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    dst[i] = std::bit_cast<float>(u);
  }
}

void fp8_rows(float* dst, const float* src, int64_t rows, int64_t cols, Fp8Format f, const Fp8RowMax& reduce,
              float* amax) {
  PARALLM_PROFILE("to_fp8");
  constexpr int64_t kRows = 64;
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) row_amax(amax, src, r0, std::min(rows, r0 + kRows), cols);
  const Fp8Tensorwise& tw = fp8_context().tensorwise;
  if (tw.on) {  // one scale: the whole tensor's maximum (inf if any row holds a non-finite value)
    float m = 0.0f;
    for (int64_t r = 0; r < rows; ++r) m = std::max(m, amax[r]);
    tw.reduce(&m, 1);
    std::fill_n(amax, rows, m);
  } else {
    reduce(amax, rows);
  }
  if (f == Fp8Format::E4M3)
    quantize_rows<3, -6>(dst, src, rows, cols, amax, kE4M3Max);
  else
    quantize_rows<2, -14>(dst, src, rows, cols, amax, kE5M2Max);
}

}  // namespace cpu
}  // namespace parallm::kernels
