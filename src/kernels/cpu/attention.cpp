// Optimized causal attention. One task per (batch, head), spread over the
// OpenMP threads; each task uses per-thread scratch of two T x T tiles and
// single-threaded GEMMs (oneDNN runs single-threaded inside a parallel region)
// reading q, k, v in place from qkv with row stride 3C.
// Forward keeps only out and the per-row log-sum-exp; backward recomputes the
// probabilities from q, k and lse (flash-attention style), so nothing T x T
// outlives a call. Tasks write disjoint slices: thread-count independent.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/cpu/simd.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"

namespace parallm::kernels::cpu {

namespace {

// Row i of the causal scores -> probabilities (in place), returns log-sum-exp.
PARALLM_CLONES float softmax_row(float* s, int64_t len, int64_t T) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < len; ++j) mx = std::max(mx, s[j]);
  float sum = 0;
  for (int64_t j = 0; j < len; ++j) {
    float e = simd::fast_expf(s[j] - mx);
    s[j] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
  for (int64_t j = 0; j < len; ++j) s[j] *= inv;
  for (int64_t j = len; j < T; ++j) s[j] = 0.0f;
  return mx + std::log(sum);
}

PARALLM_CLONES void probs_from_lse(float* s, int64_t len, int64_t T, float lse) {
  for (int64_t j = 0; j < len; ++j) s[j] = simd::fast_expf(s[j] - lse);
  for (int64_t j = len; j < T; ++j) s[j] = 0.0f;
}

PARALLM_CLONES float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// dS = P * (dP - D) * scale over the causal part of a row.
PARALLM_CLONES void dscores_row(float* ds, const float* p, const float* dp, int64_t len, int64_t T, float D,
                                float scale) {
  for (int64_t j = 0; j < len; ++j) ds[j] = p[j] * (dp[j] - D) * scale;
  for (int64_t j = len; j < T; ++j) ds[j] = 0.0f;
}

// Multiplies row i of a T x T tile by the dropout mask of (bh, i, .), scaled by 1/(1-p).
void apply_dropout_row(float* row, int64_t len, int64_t bh, int64_t i, int64_t T, const AttnDropout& d) {
  const float scale = 1.0f / (1.0f - d.p);
  for (int64_t j = 0; j < len; ++j)
    row[j] = dropout_keep(d.p, d.seed, d.stream, static_cast<uint64_t>((bh * T + i) * T + j)) ? row[j] * scale : 0.0f;
}

}  // namespace

int64_t attention_workspace_floats(int64_t, int64_t T, int64_t, int64_t, int nthreads) {
  return static_cast<int64_t>(nthreads) * 3 * T * T;
}

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       AttnDropout drop, float* ws) {
  const int64_t HS = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    float* S = ws + static_cast<int64_t>(omp_get_thread_num()) * 3 * T * T;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * T * C3 + h * HS;
      const float* k = q + C;
      const float* v = q + 2 * C;
      sgemm(false, true, T, T, HS, scale, q, C3, k, C3, 0.0f, S, T);
      for (int64_t i = 0; i < T; ++i) {
        lse[bh * T + i] = softmax_row(S + i * T, i + 1, T);
        if (drop.p > 0) apply_dropout_row(S + i * T, i + 1, bh, i, T, drop);
      }
      sgemm(false, false, T, HS, T, 1.0f, S, T, v, C3, 0.0f, out + b * T * C + h * HS, C);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t C, int64_t NH, AttnDropout drop, float* ws) {
  const int64_t HS = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    float* P = ws + static_cast<int64_t>(omp_get_thread_num()) * 3 * T * T;
    float* dP = P + T * T;
    float* Pd = dP + T * T;  // probabilities after dropout (only used when p > 0)
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * T * C3 + h * HS;
      const float* k = q + C;
      const float* v = q + 2 * C;
      const float* dy = dout + b * T * C + h * HS;
      const float* o = out + b * T * C + h * HS;
      float* dq = dqkv + b * T * C3 + h * HS;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      sgemm(false, true, T, T, HS, scale, q, C3, k, C3, 0.0f, P, T);
      for (int64_t i = 0; i < T; ++i) probs_from_lse(P + i * T, i + 1, T, lse[bh * T + i]);
      const float* Pused = P;
      if (drop.p > 0) {
        std::copy(P, P + T * T, Pd);
        for (int64_t i = 0; i < T; ++i) apply_dropout_row(Pd + i * T, i + 1, bh, i, T, drop);
        Pused = Pd;
      }
      // dV = P'^T dO ; dP' = dO V^T
      sgemm(true, false, T, HS, T, 1.0f, Pused, T, dy, C, 0.0f, dv, C3);
      sgemm(false, true, T, T, HS, 1.0f, dy, C, v, C3, 0.0f, dP, T);
      for (int64_t i = 0; i < T; ++i) {
        if (drop.p > 0) apply_dropout_row(dP + i * T, i + 1, bh, i, T, drop);
        const float D = dot(dy + i * C, o + i * C, HS);
        dscores_row(dP + i * T, P + i * T, dP + i * T, i + 1, T, D, scale);
      }
      // dQ = dS K ; dK = dS^T Q
      sgemm(false, false, T, HS, T, 1.0f, dP, T, k, C3, 0.0f, dq, C3);
      sgemm(true, false, T, HS, T, 1.0f, dP, T, q, C3, 0.0f, dk, C3);
    }
  }
}

}  // namespace parallm::kernels::cpu
