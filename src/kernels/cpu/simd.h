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
// - fast_expf / fast_erf are branch-free polynomial and rational versions
//   (within 1 ulp for exp over [-87, 88]; erf below) that the compiler can
//   vectorize, unlike libm's scalar calls.
// - Clamping to constant bounds invites GCC to compute a function on the
//   unclamped input and blend in its values at the bounds (4 compares and 3
//   blends a vector instead of a min and a max). Loops that clamp in their hot
//   path take the bounds from opaque(), called once before the loop.
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

// v, unchanged, as a value the optimizer cannot see through (no code; on
// x86-64, elsewhere plain v): clamp bounds made with it stay vector min/max.
// Call it outside the loop: inside, the asm keeps the loop from vectorizing.
__attribute__((always_inline)) inline float opaque(float v) {
#if defined(__x86_64__)
  asm("" : "+x"(v));
#endif
  return v;
}

// Clamp bounds for fast_expf and fast_erf, held through opaque(): construct
// one before the loop and pass it in.
struct ExpBounds {
  float lo = opaque(-87.0f), hi = opaque(88.0f);  // exp stays a normal float
};
struct ErfBounds {
  float lo = opaque(-4.0f), hi = opaque(4.0f);  // beyond, erf is +-1 in fp32
  float neg1 = opaque(-1.0f), pos1 = opaque(1.0f);
};

__attribute__((always_inline)) inline float fast_expf(float x, const ExpBounds& b) {
  x = clampf(x, b.lo, b.hi);
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

// erf(z) as z * P(z^2) / Q(z^2) over [-4, 4], degrees 6 and 4, fitted for
// parallm by tools/fit_erf.py to 6.5e-8 relative. Evaluated in fp32 (a few
// ulp of erf near 1), the result is clamped to [-1, 1] so that Phi = (1 +
// erf(x / sqrt 2)) / 2 stays in [0, 1]; gelu.h states the bound that
// tests/kernels holds GELU to. Phi from erf cancels in the left tail, as fp32
// PyTorch's GELU does.
__attribute__((always_inline)) inline float fast_erf(float z, const ErfBounds& b) {
  z = clampf(z, b.lo, b.hi);
  const float t = z * z;
  const float p_hi = ((1.9110630e-08f * t - 1.9422866e-06f) * t + 1.4728430e-04f) * t + 3.9905231e-03f;
  const float p = ((p_hi * t + 5.1524770e-02f) * t + 2.0712444e-01f) * t + 1.1283791e+00f;
  const float q = (((1.0210971e-03f * t + 1.4957988e-02f) * t + 1.1797040e-01f) * t + 5.1689053e-01f) * t + 1.0f;
  return clampf(z * p / q, b.neg1, b.pos1);
}

}  // namespace parallm::kernels::simd
