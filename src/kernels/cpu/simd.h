// Helpers for the optimized CPU kernels.
// - PARALLM_CLONES compiles a function for AVX-512F, x86-64-v3 (AVX2 + FMA)
//   and baseline x86-64 and picks one at load time from the CPU's feature bits
//   (GCC ifunc). Feature clones, not CPU-model ones (arch=skylake...): those
//   miss virtualized CPUs; x86-64-v3 is a feature level, tested bit by bit. A
//   plain "avx2" clone would lack FMA (a separate feature), halving its
//   arithmetic; avx512f implies FMA.
//   The binary stays portable and still uses the widest vectors available. Hot
//   loops live in such functions; OpenMP regions call them per row or chunk.
//   Helpers they call are always_inline so they are compiled into each clone.
// - Kernels whose best code differs by ISA in more than vector width (register
//   tiles sized to the register file) pick one at run time from isa():
//   functions with explicit target attributes, selected once (cpu/isa.h).
// - fast_expf / fast_norm_cdf are branch-free polynomial versions
//   (within 1 ulp for exp over [-87, 88]; erfc below) that the compiler can
//   vectorize, unlike libm's scalar calls.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa.h"

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__clang__)
#define PARALLM_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#else
#define PARALLM_CLONES
#endif

namespace parallm::kernels::simd {

// 16, 8 and 4 floats as one vector (zmm, ymm, xmm; split where the ISA is
// narrower); aligned(4) allows unaligned loads and stores through loadv/storev.
typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef float v4 __attribute__((vector_size(16), aligned(4)));

template <class V>
__attribute__((always_inline)) inline V loadv(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <class V>
__attribute__((always_inline)) inline void storev(float* p, V v) {
  std::memcpy(p, &v, sizeof(v));
}

// Clamp with plain comparisons: they compile to vector min/max, whereas
// std::fmin/fmax (NaN rules) become library calls that stop vectorization.
__attribute__((always_inline)) inline float clampf(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

__attribute__((always_inline)) inline float fast_expf(float x) {
  x = clampf(x, -87.0f, 88.0f);
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  // The polynomial in Estrin's form (pairs, then powers of r^2): a third of
  // the dependent multiply-adds of Horner's, which bound these kernels' speed.
  const float r2 = r * r;
  const float p01 = 1.6666665459e-1f * r + 5.0000001201e-1f, p23 = 8.3334519073e-3f * r + 4.1665795894e-2f;
  const float p45 = 1.9875691500e-4f * r + 1.3981999507e-3f;
  const float p = (p45 * r2 + p23) * r2 + p01;
  float y = p * r2 + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

// erfc(|x|) from a Chebyshev fit (Numerical Recipes erfcc form): the fit is
// 1.2e-7 relative; in fp32 the rounding of -z^2 in the exponent brings that to
// 8e-6 relative deep in the tail (z near 9), as with any fp32 erfc of this form.
__attribute__((always_inline)) inline float fast_erfc_abs(float x) {
  float z = std::fabs(x);
  float t = 1.0f / (1.0f + 0.5f * z);
  // Estrin's form of the degree-9 polynomial in t (see fast_expf).
  const float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
  const float p01 = 1.00002368f * t - 1.26551223f, p23 = 0.09678418f * t + 0.37409196f;
  const float p45 = 0.27886807f * t - 0.18628806f, p67 = 1.48851587f * t - 1.13520398f;
  const float p89 = 0.17087277f * t - 0.82215223f;
  const float poly = ((p23 * t2 + p01) + (p67 * t2 + p45) * t4) + p89 * t8;
  return t * fast_expf(-z * z + poly);
}

// Standard normal CDF Phi(x) = 0.5 * (1 + erf(x / sqrt 2)), computed from erfc
// on the negative side so the left tail keeps its relative precision.
__attribute__((always_inline)) inline float fast_norm_cdf(float x) {
  float h = 0.5f * fast_erfc_abs(x * 0.70710678118654752f);
  return x >= 0.0f ? 1.0f - h : h;
}

}  // namespace parallm::kernels::simd
