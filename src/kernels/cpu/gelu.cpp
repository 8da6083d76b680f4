// Optimized GELU: chunks in parallel, vectorizable rational erf and polynomial
// exp (simd.h), with clamp bounds the compiler keeps as vector min/max.
#include "kernels/gelu.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr int64_t kChunk = 4096;

// Clamp bounds made once per chunk (simd::opaque): erf's, exp's and tanh's u.
struct Bounds {
  simd::ErfBounds erf;
  simd::ExpBounds exp;
  float u_lo = simd::opaque(-15.0f), u_hi = simd::opaque(15.0f);
};

// Phi(x), the standard normal CDF, from erf.
__attribute__((always_inline)) inline float norm_cdf(float x, const Bounds& b) {
  return 0.5f + 0.5f * simd::fast_erf(x * kInvSqrt2, b.erf);
}

PARALLM_CLONES void gelu_fwd_chunk(float* out, const float* x, int64_t n, bool exact) {
  const Bounds b;
  if (exact)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * norm_cdf(x[i], b);
  else
    for (int64_t i = 0; i < n; ++i) {
      // 0.5 * (1 + tanh(u)) = e / (e + 1) with e = exp(2u): no cancellation in the left tail.
      float u = kSqrt2OverPi * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
      float e = simd::fast_expf(2.0f * simd::clampf(u, b.u_lo, b.u_hi), b.exp);
      out[i] = x[i] * e / (e + 1.0f);
    }
}

PARALLM_CLONES void gelu_bwd_chunk(float* dinp, const float* x, const float* dy, int64_t n, bool exact) {
  const Bounds b;
  if (exact)
    for (int64_t i = 0; i < n; ++i) {
      const float cdf = norm_cdf(x[i], b);
      const float pdf = kInvSqrt2Pi * simd::fast_expf(-0.5f * x[i] * x[i], b.exp);
      dinp[i] = (cdf + x[i] * pdf) * dy[i];
    }
  else
    for (int64_t i = 0; i < n; ++i) {
      float x3 = x[i] * x[i] * x[i];
      float u = kSqrt2OverPi * (x[i] + 0.044715f * x3);
      float e = simd::fast_expf(2.0f * simd::clampf(u, b.u_lo, b.u_hi), b.exp);
      float inv = 1.0f / (e + 1.0f);
      float half_1p_th = e * inv;          // 0.5 * (1 + tanh u)
      float sech2 = 4.0f * e * inv * inv;  // 1 - tanh^2 u
      float g = half_1p_th + 0.5f * x[i] * sech2 * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x[i] * x[i]);
      dinp[i] = g * dy[i];
    }
}
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, GeluKind kind) {
  PARALLM_PROFILE("gelu_forward");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk)
    gelu_fwd_chunk(out + i, inp + i, std::min(kChunk, n - i), kind == GeluKind::Exact);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluKind kind) {
  PARALLM_PROFILE("gelu_backward");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk)
    gelu_bwd_chunk(dinp + i, inp + i, dout + i, std::min(kChunk, n - i), kind == GeluKind::Exact);
}

}  // namespace parallm::kernels::cpu
