// Context parallelism's attention blocks on the CPU (attention.h, AttnBlock):
// the flash-style loop of the unsplit kernels (attention.cpp) with the query
// and key rows at global offsets q0 and k0 and any strides. One task per
// (batch, head) over OpenMP threads; query rows in blocks of kBr, each against
// only the keys it may see by the causal rule, so a block of keys wholly after
// the queries costs nothing. Forward computes the block's probabilities,
// output and log-sum-exp in per-thread scratch and then merges them into the
// running out and lse; backward recomputes the probabilities from the merged
// lse and adds this block's share to dq, dk and dv. Each task writes only its
// own (b, h) slices, so the result does not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/profiler.h"
#include "kernels/attention.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/small_gemm.h"

namespace parallm::kernels {

void check_attn_block(const AttnBlock& b, const char* where) {
  PARALLM_CHECK(b.B >= 0 && b.NH > 0 && b.HS > 0 && b.Tq >= 0 && b.Tk >= 0, ShapeError, where,
                "bad block shape B={} NH={} HS={} Tq={} Tk={}", b.B, b.NH, b.HS, b.Tq, b.Tk);
  PARALLM_CHECK(b.q0 >= 0 && b.k0 >= 0 && b.q0 + b.Tq <= b.T && b.k0 + b.Tk <= b.T, ShapeError, where,
                "query rows [{}, {}) or key rows [{}, {}) outside the sequence of T={}", b.q0, b.q0 + b.Tq, b.k0,
                b.k0 + b.Tk, b.T);
}

}  // namespace parallm::kernels

namespace parallm::kernels::cpu {

namespace {

using namespace attn;

// Per-thread scratch: K^T, V^T (HS x ld), four kBr x ld tiles, the block's
// output (kBr x HS) and log-sum-exp (kBr).
int64_t per_thread_floats(int64_t Tk, int64_t HS) {
  const int64_t ld = scratch_ld(Tk);
  return 2 * HS * ld + 4 * kBr * ld + kBr * (HS + 1) + 64;
}

// Keys visible to some query row before block-local row `end`: row i sees keys j < q0 + i + 1 - k0.
int64_t keys_before(const AttnBlock& b, int64_t end) {
  return std::clamp(b.q0 + end - b.k0, int64_t{0}, b.Tk);
}

// The dropout index of query row i, key row 0 of the block, for global (sample, head) gbh.
uint64_t row_index(const AttnBlock& b, int64_t gbh, int64_t i) {
  return static_cast<uint64_t>((gbh * b.T + b.q0 + i) * b.T + b.k0);
}

// Merges a row's block output ob (log-sum-exp lb) into its running o (log-sum-exp *l).
void merge_row(float* o, float* l, const float* ob, float lb, int64_t HS) {
  if (lb == -INFINITY) return;  // no visible key
  const float la = *l;
  if (la == -INFINITY) {
    std::copy(ob, ob + HS, o);
    *l = lb;
    return;
  }
  const float ln = std::max(la, lb) + std::log1p(std::exp(-std::fabs(la - lb)));
  const float wa = std::exp(la - ln), wb = std::exp(lb - ln);
  for (int64_t c = 0; c < HS; ++c) o[c] = wa * o[c] + wb * ob[c];
  *l = ln;
}

// One (b, h): pointers at its head, lse at its row 0.
void fwd_head(float* out, float* lse, const float* q, const float* k, const float* v, const AttnBlock& blk, int64_t gbh,
              const AttnDropout& drop, float* ws) {
  const int64_t HS = blk.HS, ld = scratch_ld(blk.Tk);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* Kt = ws;
  float* S = Kt + HS * ld;
  float* Pd = S + kBr * ld;
  float* Ob = Pd + kBr * ld;
  float* lb = Ob + kBr * HS;
  const int64_t nall = keys_before(blk, blk.Tq);
  if (nall > 0) transpose(Kt, ld, k, blk.kv_ld, nall, HS);
  for (int64_t i0 = 0; i0 < blk.Tq; i0 += kBr) {
    const int64_t rows = std::min(kBr, blk.Tq - i0), n = keys_before(blk, i0 + rows);
    float* o = out + i0 * blk.o_ld;
    float* l = lse + i0;
    if (n == 0) {  // no row of this block sees a key
      if (blk.first)
        for (int64_t r = 0; r < rows; ++r) {
          std::fill(o + r * blk.o_ld, o + r * blk.o_ld + HS, 0.0f);
          l[r] = -INFINITY;
        }
      continue;
    }
    small_gemm(rows, n, HS, scale, q + i0 * blk.q_ld, blk.q_ld, Kt, ld, S, ld, false);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t len = keys_before(blk, i0 + r + 1);
      if (len > 0) {
        lb[r] = softmax_row(S + r * ld, len, n);
      } else {
        std::fill(S + r * ld, S + r * ld + n, 0.0f);
        lb[r] = -INFINITY;
      }
    }
    const float* P = S;
    if (drop.p > 0) {
      for (int64_t r = 0; r < rows; ++r) dropout_row(Pd + r * ld, S + r * ld, n, row_index(blk, gbh, i0 + r), drop);
      P = Pd;
    }
    if (blk.first) {
      small_gemm(rows, HS, n, 1.0f, P, ld, v, blk.kv_ld, o, blk.o_ld, false);
      std::copy(lb, lb + rows, l);
      continue;
    }
    small_gemm(rows, HS, n, 1.0f, P, ld, v, blk.kv_ld, Ob, HS, false);
    for (int64_t r = 0; r < rows; ++r) merge_row(o + r * blk.o_ld, l + r, Ob + r * HS, lb[r], HS);
  }
}

void bwd_head(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
              const float* out, const float* lse, const AttnBlock& blk, int64_t gbh, const AttnDropout& drop,
              float* ws) {
  const int64_t HS = blk.HS, ld = scratch_ld(blk.Tk);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* Kt = ws;
  float* Vt = Kt + HS * ld;
  float* P = Vt + HS * ld;
  float* dP = P + kBr * ld;
  float* Pd = dP + kBr * ld;
  const int64_t nall = keys_before(blk, blk.Tq);
  if (nall == 0) return;
  transpose(Kt, ld, k, blk.kv_ld, nall, HS);
  transpose(Vt, ld, v, blk.kv_ld, nall, HS);
  for (int64_t i0 = 0; i0 < blk.Tq; i0 += kBr) {
    const int64_t rows = std::min(kBr, blk.Tq - i0), n = keys_before(blk, i0 + rows);
    if (n == 0) continue;
    const float* qb = q + i0 * blk.q_ld;
    const float* dyb = dout + i0 * blk.o_ld;
    small_gemm(rows, n, HS, scale, qb, blk.q_ld, Kt, ld, P, ld, false);
    for (int64_t r = 0; r < rows; ++r) probs_row(P + r * ld, keys_before(blk, i0 + r + 1), n, lse[i0 + r]);
    small_gemm(rows, n, HS, 1.0f, dyb, blk.o_ld, Vt, ld, dP, ld, false);  // dP' = dO V^T
    const float* Pu = P;  // probabilities as forward used them (after dropout)
    if (drop.p > 0) {
      for (int64_t r = 0; r < rows; ++r) {
        std::fill(Pd + r * ld, Pd + r * ld + n, 1.0f);  // mask / (1 - p), forward's draws
        dropout_row(Pd + r * ld, Pd + r * ld, n, row_index(blk, gbh, i0 + r), drop);
        for (int64_t j = 0; j < n; ++j) {
          dP[r * ld + j] *= Pd[r * ld + j];
          Pd[r * ld + j] *= P[r * ld + j];
        }
      }
      Pu = Pd;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float D = dot(dyb + r * blk.o_ld, out + (i0 + r) * blk.o_ld, HS);
      dscores_row(dP + r * ld, P + r * ld, n, D, scale);
    }
    // dQ += dS K ; dK += dS^T Q ; dV += P'^T dO
    small_gemm(rows, HS, n, 1.0f, dP, ld, k, blk.kv_ld, dq + i0 * blk.q_ld, blk.q_ld, true);
    small_gemm_tn(n, HS, rows, 1.0f, dP, ld, qb, blk.q_ld, dk, blk.kv_ld, true);
    small_gemm_tn(n, HS, rows, 1.0f, Pu, ld, dyb, blk.o_ld, dv, blk.kv_ld, true);
  }
}

}  // namespace

int64_t attention_block_workspace_floats(int64_t, int64_t, int64_t, int64_t Tk, int64_t HS, int nthreads) {
  return static_cast<int64_t>(nthreads) * per_thread_floats(Tk, HS);
}

void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttnBlock& blk, AttnDropout drop, float* ws) {
  PARALLM_PROFILE("attention_block_forward");
  check_attn_block(blk, "kernels.cpu.attention_block_forward");
  if (blk.Tq == 0 || (!blk.first && keys_before(blk, blk.Tq) == 0)) return;
  const int64_t NH = blk.NH, HS = blk.HS;
#pragma omp parallel
  {
    float* tws = ws + static_cast<int64_t>(omp_get_thread_num()) * per_thread_floats(blk.Tk, HS);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < blk.B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH, kv = b * blk.kv_bs + h * HS;
      fwd_head(out + b * blk.o_bs + h * HS, lse + bh * blk.lse_ld, q + b * blk.q_bs + h * HS, k + kv, v + kv, blk,
               drop.global_bh(b, h, NH), drop, tws);
    }
  }
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const AttnBlock& blk,
                              AttnDropout drop, float* ws) {
  PARALLM_PROFILE("attention_block_backward");
  check_attn_block(blk, "kernels.cpu.attention_block_backward");
  if (blk.Tq == 0 || keys_before(blk, blk.Tq) == 0) return;
  const int64_t NH = blk.NH, HS = blk.HS;
#pragma omp parallel
  {
    float* tws = ws + static_cast<int64_t>(omp_get_thread_num()) * per_thread_floats(blk.Tk, HS);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < blk.B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH, qo = b * blk.q_bs + h * HS, kv = b * blk.kv_bs + h * HS,
                    o = b * blk.o_bs + h * HS;
      bwd_head(dq + qo, dk + kv, dv + kv, dout + o, q + qo, k + kv, v + kv, out + o, lse + bh * blk.lse_ld, blk,
               drop.global_bh(b, h, NH), drop, tws);
    }
  }
}

}  // namespace parallm::kernels::cpu
