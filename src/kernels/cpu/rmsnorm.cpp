// Optimized RMSNorm: rows in parallel, a vectorized sum of squares per row.
// Backward computes dinp per row in parallel and dweight per block of columns
// over all rows in order, so any thread count gives the same bits.
#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
PARALLM_CLONES void rms_row_forward(float* out, float* rstd, const float* x, const float* w, int64_t C, float eps) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
  for (int64_t c = 0; c < C; ++c) out[c] = w[c] * (x[c] * r);
  *rstd = r;
}

PARALLM_CLONES void rms_row_backward(float* dinp, const float* dy, const float* x, const float* w, float r, int64_t C) {
  float dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t c = 0; c < C; ++c) dot += dy[c] * w[c] * x[c];
  const float k = r * r * r * dot / static_cast<float>(C);
  for (int64_t c = 0; c < C; ++c) dinp[c] += r * dy[c] * w[c] - x[c] * k;
}

PARALLM_CLONES void rms_weight_block(float* dw, const float* dout, const float* inp, const float* rstd, int64_t N,
                                     int64_t C, int64_t c0, int64_t c1) {
  float acc[64];
  const int64_t w = c1 - c0;
  std::fill(acc, acc + w, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C + c0;
    const float* x = inp + n * C + c0;
    const float r = rstd[n];
    for (int64_t j = 0; j < w; ++j) acc[j] += dy[j] * (x[j] * r);
  }
  for (int64_t j = 0; j < w; ++j) dw[c0 + j] += acc[j];
}
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
  PARALLM_PROFILE("rmsnorm_forward");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) rms_row_forward(out + n * C, rstd + n, inp + n * C, weight, C, eps);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
  PARALLM_PROFILE("rmsnorm_backward");
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < N; ++n) rms_row_backward(dinp + n * C, dout + n * C, inp + n * C, weight, rstd[n], C);
#pragma omp for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += 64) rms_weight_block(dweight, dout, inp, rstd, N, C, c0, std::min(C, c0 + 64));
  }
}

}  // namespace parallm::kernels::cpu
