// Optimized SwiGLU gate: chunks in parallel, the vectorizable polynomial exp
// of simd.h (within 1 ulp) for the sigmoid.
#include "kernels/swiglu.h"

#include <algorithm>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
constexpr int64_t kChunk = 4096;

PARALLM_CLONES void swiglu_fwd_chunk(float* out, const float* g, const float* u, int64_t n) {
  const simd::ExpBounds b;
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + simd::fast_expf(-g[i], b)) * u[i];
}

PARALLM_CLONES void swiglu_bwd_chunk(float* dg, float* du, const float* dy, const float* g, const float* u, int64_t n) {
  const simd::ExpBounds b;
  for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + simd::fast_expf(-g[i], b));
    const float d = dy[i];  // dg or du may alias dy
    dg[i] = d * u[i] * s * (1.0f + g[i] * (1.0f - s));
    du[i] = d * g[i] * s;
  }
}
}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  PARALLM_PROFILE("swiglu_forward");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk) swiglu_fwd_chunk(out + i, gate + i, up + i, std::min(kChunk, n - i));
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  PARALLM_PROFILE("swiglu_backward");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk)
    swiglu_bwd_chunk(dgate + i, dup + i, dout + i, gate + i, up + i, std::min(kChunk, n - i));
}

}  // namespace parallm::kernels::cpu
