// Optimized AdamW: one fused vectorized pass over param, grad, m, v.
// Bias corrections are computed once per call in double, as torch does.
#include "kernels/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
constexpr int64_t kChunk = 16384;
PARALLM_CLONES void adamw_chunk(float* w, const float* g, float* m, float* v, int64_t n, float decay, float b1,
                                float b2, float step_size, float inv_bc2_sqrt, float eps, float gs, uint16_t* lp) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * gs;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) * inv_bc2_sqrt + eps;
    w[i] = w[i] * decay - step_size * mi / denom;
  }
  // The copy from the chunk just written (64 KiB, still in L1/L2), by the conversion the model uses.
  if (lp)
    for (int64_t i = 0; i < n; ++i) lp[i] = f32_to_bf16(w[i]);
}
PARALLM_CLONES double sumsq_chunk(const float* x, int64_t n) {
  // Squares in double are exact and never overflow, so a gradient scaled by a
  // power of two S (loss scaling) gives exactly S^2 times the sum, and only an
  // inf or NaN gradient makes it non-finite.
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}
}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                bfloat16* param_bf16) {
  PARALLM_PROFILE("adamw_step");
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const float step_size = static_cast<float>(p.lr / bc1);
  const float inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - p.lr * p.weight_decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk)
    adamw_chunk(param + i, grad + i, m + i, v + i, std::min(kChunk, n - i), decay, p.beta1, p.beta2, step_size,
                inv_bc2_sqrt, p.eps, p.grad_scale, param_bf16 ? reinterpret_cast<uint16_t*>(param_bf16) + i : nullptr);
}

void adamw_runs(float* param, const float* grad, float* m, float* v, const AdamWRun* runs, int64_t nruns,
                const AdamWParams& p, bfloat16* param_bf16) {
  adamw_each_run(&adamw_step, param, grad, m, v, runs, nruns, p, param_bf16);
}

double sum_squares(const float* x, int64_t n) {
  PARALLM_PROFILE("sum_squares");
  // A fixed number of blocks, whatever the thread count: each block's partial
  // sum lands in its own slot and the slots are added in order, so the result
  // is the same for any number of threads.
  constexpr int kBlocks = 64;
  double part[kBlocks] = {};
  const int64_t per = (n + kBlocks - 1) / kBlocks;
#pragma omp parallel for schedule(static)
  for (int b = 0; b < kBlocks; ++b) {
    const int64_t lo = std::min(n, b * per), hi = std::min(n, lo + per);
    double acc = 0;
    for (int64_t i = lo; i < hi; i += kChunk) acc += sumsq_chunk(x + i, std::min(kChunk, hi - i));
    part[b] = acc;
  }
  double total = 0;
  for (double p : part) total += p;
  return total;
}

}  // namespace parallm::kernels::cpu
