// Optimized causal attention, flash-style on CPU. One task per (batch,
// head) spread over OpenMP threads; within a task, query rows are processed in
// blocks of kBr, so scratch is K^T and V^T (HS x T) plus a few kBr x T tiles:
// no T x T matrix exists at any point, and nothing but out and the per-row
// log-sum-exp is kept for backward, which recomputes the probabilities.
// Products go through small_gemm (register-blocked, no BLAS call overhead);
// the causal structure is exploited per block (keys up to the block's last
// row). Each task writes only its own (b, h) slices, so the result does not
// depend on the thread count.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/profiler.h"
#include "core/rng.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/elementwise.h"

namespace parallm::kernels::cpu {

namespace attn {

int64_t scratch_ld(int64_t n) {
  return (n + 15) / 16 * 16 + 16;
}

void dropout_row(float* row, const float* src, int64_t len, uint64_t index0, const AttnDropout& d) {
  const float scale = 1.0f / (1.0f - d.p);
  for (int64_t j = 0; j < len; ++j)
    row[j] = dropout_keep(d.p, d.seed, d.stream, index0 + static_cast<uint64_t>(j)) ? src[j] * scale : 0.0f;
}

PARALLM_CLONES float softmax_row(float* s, int64_t len, int64_t n) {
  const simd::ExpBounds eb;
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < len; ++j) mx = s[j] > mx ? s[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < len; ++j) {
    s[j] = simd::fast_expf(s[j] - mx, eb);
    sum += s[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < len; ++j) s[j] *= inv;
  for (int64_t j = len; j < n; ++j) s[j] = 0.0f;
  return mx + std::log(sum);
}

PARALLM_CLONES void probs_row(float* s, int64_t len, int64_t n, float lse) {
  const simd::ExpBounds eb;
  for (int64_t j = 0; j < len; ++j) s[j] = simd::fast_expf(s[j] - lse, eb);
  for (int64_t j = len; j < n; ++j) s[j] = 0.0f;
}

PARALLM_CLONES void dscores_row(float* dp, const float* p, int64_t n, float D, float scale) {
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - D) * scale;
}

PARALLM_CLONES float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace attn

namespace {

using namespace attn;

// Per-thread scratch: K^T, V^T (HS x ld) and four kBr x ld tiles.
int64_t per_thread_floats(int64_t T, int64_t HS) {
  return 2 * HS * scratch_ld(T) + 4 * kBr * scratch_ld(T) + 64;
}

// The dropout index of (bh, i, key 0) (bh: the global (sample, head) index, AttnDropout::global_bh).
uint64_t row_index(int64_t bh, int64_t i, int64_t T) {
  return static_cast<uint64_t>((bh * T + i) * T);
}

void fwd_head(float* out, float* lse, const float* q, const float* k, const float* v, int64_t T, int64_t HS, int64_t C,
              int64_t C3, int64_t bh, const AttnDropout& drop, float* ws) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t ld = scratch_ld(T);
  float* Kt = ws;
  float* S = Kt + HS * ld;
  float* Pd = S + kBr * ld;
  transpose(Kt, ld, k, C3, T, HS);
  for (int64_t i0 = 0; i0 < T; i0 += kBr) {
    const int64_t rows = std::min(kBr, T - i0), n = i0 + rows;  // keys 0..n-1 matter to this block
    small_gemm(rows, n, HS, scale, q + i0 * C3, C3, Kt, ld, S, ld, false);
    for (int64_t r = 0; r < rows; ++r) lse[i0 + r] = softmax_row(S + r * ld, i0 + r + 1, n);
    const float* P = S;
    if (drop.p > 0) {
      for (int64_t r = 0; r < rows; ++r) dropout_row(Pd + r * ld, S + r * ld, n, row_index(bh, i0 + r, T), drop);
      P = Pd;
    }
    small_gemm(rows, HS, n, 1.0f, P, ld, v, C3, out + i0 * C, C, false);
  }
}

void bwd_head(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
              const float* out, const float* lse, int64_t T, int64_t HS, int64_t C, int64_t C3, int64_t bh,
              const AttnDropout& drop, float* ws) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t ld = scratch_ld(T);
  float* Kt = ws;
  float* Vt = Kt + HS * ld;
  float* P = Vt + HS * ld;
  float* dP = P + kBr * ld;
  float* Pd = dP + kBr * ld;
  transpose(Kt, ld, k, C3, T, HS);
  transpose(Vt, ld, v, C3, T, HS);
  for (int64_t i0 = 0; i0 < T; i0 += kBr) {
    const int64_t rows = std::min(kBr, T - i0), n = i0 + rows;
    const float* qb = q + i0 * C3;
    const float* dyb = dout + i0 * C;
    small_gemm(rows, n, HS, scale, qb, C3, Kt, ld, P, ld, false);
    for (int64_t r = 0; r < rows; ++r) probs_row(P + r * ld, i0 + r + 1, n, lse[i0 + r]);
    small_gemm(rows, n, HS, 1.0f, dyb, C, Vt, ld, dP, ld, false);  // dP' = dO V^T
    const float* Pu = P;                                           // probabilities as forward used them (after dropout)
    if (drop.p > 0) {
      for (int64_t r = 0; r < rows; ++r) {
        // mask / (1 - p) per entry, from the same counter-based draws as forward
        std::fill(Pd + r * ld, Pd + r * ld + n, 1.0f);
        dropout_row(Pd + r * ld, Pd + r * ld, n, row_index(bh, i0 + r, T), drop);
        for (int64_t j = 0; j < n; ++j) {
          dP[r * ld + j] *= Pd[r * ld + j];
          Pd[r * ld + j] *= P[r * ld + j];
        }
      }
      Pu = Pd;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float D = dot(dyb + r * C, out + (i0 + r) * C, HS);
      dscores_row(dP + r * ld, P + r * ld, n, D, scale);
    }
    // dQ = dS K ; dK += dS^T Q ; dV += P'^T dO
    small_gemm(rows, HS, n, 1.0f, dP, ld, k, C3, dq + i0 * C3, C3, false);
    // Keys [0, i0) already hold contributions of earlier blocks; keys [i0, n)
    // are seen first by this block, so they are written, not accumulated
    // (no zeroing pass over dK and dV).
    small_gemm_tn(i0, HS, rows, 1.0f, dP, ld, qb, C3, dk, C3, true);
    small_gemm_tn(rows, HS, rows, 1.0f, dP + i0, ld, qb, C3, dk + i0 * C3, C3, false);
    small_gemm_tn(i0, HS, rows, 1.0f, Pu, ld, dyb, C, dv, C3, true);
    small_gemm_tn(rows, HS, rows, 1.0f, Pu + i0, ld, dyb, C, dv + i0 * C3, C3, false);
  }
}

}  // namespace

int64_t attention_workspace_floats(int64_t, int64_t T, int64_t C, int64_t NH, int nthreads) {
  return static_cast<int64_t>(nthreads) * per_thread_floats(T, C / NH);
}

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       AttnDropout drop, float* ws) {
  PARALLM_PROFILE("attention_forward");
  const int64_t HS = C / NH, C3 = 3 * C;
#pragma omp parallel
  {
    float* tws = ws + static_cast<int64_t>(omp_get_thread_num()) * per_thread_floats(T, HS);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * T * C3 + h * HS;
      fwd_head(out + b * T * C + h * HS, lse + bh * T, q, q + C, q + 2 * C, T, HS, C, C3, drop.global_bh(b, h, NH),
               drop, tws);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B,
                        int64_t T, int64_t C, int64_t NH, AttnDropout drop, float* ws) {
  PARALLM_PROFILE("attention_backward");
  const int64_t HS = C / NH, C3 = 3 * C;
#pragma omp parallel
  {
    float* tws = ws + static_cast<int64_t>(omp_get_thread_num()) * per_thread_floats(T, HS);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * T * C3 + h * HS;
      float* dq = dqkv + b * T * C3 + h * HS;
      bwd_head(dq, dq + C, dq + 2 * C, dout + b * T * C + h * HS, q, q + C, q + 2 * C, out + b * T * C + h * HS,
               lse + bh * T, T, HS, C, C3, drop.global_bh(b, h, NH), drop, tws);
    }
  }
}

}  // namespace parallm::kernels::cpu
