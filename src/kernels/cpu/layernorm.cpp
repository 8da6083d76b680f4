// Optimized LayerNorm: rows in parallel, vectorized two-pass statistics.
// Backward computes dinp per row in parallel, and dweight/dbias per block of
// columns over all rows in order (deterministic for any thread count, no
// atomics or per-thread partial buffers).
#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
PARALLM_CLONES void ln_row_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                   int64_t C) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += x[c];
  float m = s / C;
  float v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t c = 0; c < C; ++c) {
    float d = x[c] - m;
    v += d * d;
  }
  float rs = 1.0f / std::sqrt(v / C + kLayerNormEps);
  if (b)
    for (int64_t c = 0; c < C; ++c) out[c] = (x[c] - m) * rs * w[c] + b[c];
  else
    for (int64_t c = 0; c < C; ++c) out[c] = (x[c] - m) * rs * w[c];
  *mean = m;
  *rstd = rs;
}

PARALLM_CLONES void ln_row_backward(float* dinp, const float* dy, const float* x, const float* w, float m, float rs,
                                    int64_t C) {
  float a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
  for (int64_t c = 0; c < C; ++c) {
    float xhat = (x[c] - m) * rs;
    float dn = dy[c] * w[c];
    a += dn;
    bsum += dn * xhat;
  }
  a /= C;
  bsum /= C;
  for (int64_t c = 0; c < C; ++c) {
    float xhat = (x[c] - m) * rs;
    dinp[c] += (dy[c] * w[c] - a - xhat * bsum) * rs;
  }
}

PARALLM_CLONES void ln_params_block(float* dw, float* db, const float* dout, const float* inp, const float* mean,
                                    const float* rstd, int64_t N, int64_t C, int64_t c0, int64_t c1) {
  float aw[64], ab[64];
  int64_t w = c1 - c0;
  std::fill(aw, aw + w, 0.0f);
  std::fill(ab, ab + w, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C + c0;
    const float* x = inp + n * C + c0;
    float m = mean[n], rs = rstd[n];
    for (int64_t j = 0; j < w; ++j) {
      aw[j] += dy[j] * ((x[j] - m) * rs);
      ab[j] += dy[j];
    }
  }
  for (int64_t j = 0; j < w; ++j) dw[c0 + j] += aw[j];
  if (db)
    for (int64_t j = 0; j < w; ++j) db[c0 + j] += ab[j];
}
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C) {
  PARALLM_PROFILE("layernorm_forward");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) ln_row_forward(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  PARALLM_PROFILE("layernorm_backward");
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < N; ++n)
      ln_row_backward(dinp + n * C, dout + n * C, inp + n * C, weight, mean[n], rstd[n], C);
#pragma omp for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += 64)
      ln_params_block(dweight, dbias, dout, inp, mean, rstd, N, C, c0, std::min(C, c0 + 64));
  }
}

}  // namespace parallm::kernels::cpu
