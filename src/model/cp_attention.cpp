#include "model/cp_attention.h"

#include <time.h>

#include <type_traits>
#include <utility>

#include "core/error.h"
#include "kernels/ops.h"

namespace parallm::model {

namespace {
// Ring exchanges in flight together are told apart by tag.
constexpr int kTagKv = 1, kTagKvBack = 2, kTagDkv = 3;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A key run is visible to a query run unless it lies wholly after it (causal).
bool visible(const CpRun& q, const CpRun& kr) {
  return kr.global <= q.global + q.len - 1;
}

// Query run q of this rank's qkv [B, Tl, 3Cl] against key run kr of a packed
// K|V buffer [B, Tl, 2Cl]; out [B, Tl, Cl]; lse [B, NH, Tl].
kernels::AttnBlock block_of(const CpRun& q, const CpRun& kr, int64_t B, int64_t NH, int64_t Tl, int64_t Cl, int64_t T,
                            bool first) {
  kernels::AttnBlock b;
  b.B = B;
  b.NH = NH;
  b.HS = Cl / NH;
  b.Tq = q.len;
  b.Tk = kr.len;
  b.q0 = q.global;
  b.k0 = kr.global;
  b.T = T;
  b.q_ld = 3 * Cl;
  b.q_bs = Tl * 3 * Cl;
  b.kv_ld = 2 * Cl;
  b.kv_bs = Tl * 2 * Cl;
  b.o_ld = Cl;
  b.o_bs = Tl * Cl;
  b.lse_ld = Tl;
  b.first = first;
  return b;
}
}  // namespace

RingStep CpAttention::ring_step(const CpLayout& l, int64_t T, int s) {
  RingStep st;
  st.src = (l.rank - s + l.size) % l.size;
  CpLayout src = l;
  src.rank = st.src;
  const CpRuns mine = l.runs(T), theirs = src.runs(T);
  for (int qi = 0; qi < mine.n; ++qi)
    for (const CpRun& kr : theirs)
      if (visible(mine.run[qi], kr)) st.block[st.n++] = {mine.run[qi], kr, qi};
  return st;
}

CpAttention::CpAttention(ContextGroup& group, const ContextPart& part, int64_t n_head)
    : g_(group), layout_(part.layout()), n_head_(n_head) {
  if (layout_.size > 1 && layout_.kind == CpKind::Ring) step_cpu_s_.assign(2 * static_cast<size_t>(layout_.size), 0.0);
}

double CpAttention::block_cpu_seconds() const {
  double sum = 0;
  for (double s : step_cpu_s_) sum += s;
  return sum;
}

int64_t CpAttention::scratch_elems(const CpLayout& l, int64_t B, int64_t Tl, int64_t Cl) {
  // ring: two K|V buffers and three dK|dV buffers (this step's, the one
  // leaving, the one arriving) of B Tl 2Cl; ulysses: the all-to-all's send and
  // receive buffers (B Tl 3Cl) and backward's head-form d(out).
  if (l.size == 1) return 0;
  return l.kind == CpKind::Ring ? 10 * B * Tl * Cl : 8 * B * Tl * Cl;
}

int64_t CpAttention::head_out_elems(const CpLayout& l, int64_t B, int64_t Tl, int64_t Cl) {
  return l.size > 1 && l.kind == CpKind::Ulysses ? B * Tl * Cl : 0;
}

int64_t CpAttention::workspace_floats(const CpLayout& l, Device dev, int64_t B, int64_t Tl, int64_t Cl, int64_t NHl,
                                      int threads, bool lowp) {
  if (l.size == 1) return 0;
  const int64_t C = l.size;
  if (l.kind == CpKind::Ulysses) {
    const auto ws =
        lowp ? kernels::bf16_ops_for(dev).attention_workspace_floats : kernels::ops_for(dev).attention_workspace_floats;
    return ws(B, Tl * C, Cl / C, NHl / C, threads);
  }
  const int64_t run = l.contiguous() ? Tl : Tl / 2;
  return kernels::ops_for(dev).attention_block_workspace_floats(B, NHl, run, run, Cl / NHl, threads);
}

kernels::AttnDropout CpAttention::ulysses_drop(kernels::AttnDropout d, int64_t NHl) const {
  // The call holds heads [rank NHc, (rank + 1) NHc) of this tensor-parallel rank's NHl.
  d.bh_base += layout_.rank * (NHl / layout_.size);
  d.bh_stride = n_head_;
  return d;
}

void CpAttention::ring_forward(const kernels::ModelOps<float>& k, float* out, float* lse, const float* qkv, int64_t B,
                               int64_t Tl, int64_t Cl, int64_t NHl, const kernels::AttnDropout& drop, float* ws,
                               float* scratch) {
  const int C = layout_.size;
  const int64_t T = Tl * C, n = B * Tl * 2 * Cl;
  float *cur = scratch, *next = scratch + n;
  k.copy_rows(cur, 2 * Cl, qkv + Cl, 3 * Cl, 2 * Cl, B * Tl);
  bool seen[2] = {false, false};
  for (int s = 0; s < C; ++s) {
    if (s + 1 < C) g_.start_ring(cur, next, n, kTagKv);  // the next block travels while this one is computed
    const double t0 = thread_cpu_seconds();
    for (const RingStep::Block& b : ring_step(layout_, T, s)) {
      const kernels::AttnBlock blk = block_of(b.q, b.k, B, NHl, Tl, Cl, T, !seen[b.qi]);
      seen[b.qi] = true;
      const float* kp = cur + b.k.local * 2 * Cl;
      k.attention_block_forward(out + b.q.local * Cl, lse + b.q.local, qkv + b.q.local * 3 * Cl, kp, kp + Cl, blk, drop,
                                ws);
    }
    step_cpu_s_[s] += thread_cpu_seconds() - t0;
    if (s + 1 < C) {
      g_.wait_ring(kTagKv);
      std::swap(cur, next);
    }
  }
}

void CpAttention::ring_backward(const kernels::ModelOps<float>& k, float* dqkv, const float* dout, const float* qkv,
                                const float* out, const float* lse, int64_t B, int64_t Tl, int64_t Cl, int64_t NHl,
                                const kernels::AttnDropout& drop, float* ws, float* scratch) {
  // At step s this rank holds the K|V of rank r - s and computes its part of
  // their gradients into `mine` while two messages travel: the next K|V, and
  // the accumulator of this block's gradients that ranks r - s .. r - 1 have
  // summed (rank r - 1 finished it a step ago). Once both are in, mine += it
  // and the sum leaves at the next step, overlapped with that step's compute.
  // The accumulator makes C hops and comes home after the last step.
  const int C = layout_.size;
  const int64_t T = Tl * C, n = B * Tl * 2 * Cl;
  float *kv = scratch, *kv_next = scratch + n, *mine = scratch + 2 * n, *done = scratch + 3 * n, *in = scratch + 4 * n;
  k.copy_rows(kv, 2 * Cl, qkv + Cl, 3 * Cl, 2 * Cl, B * Tl);
  k.fill(dqkv, B * Tl * 3 * Cl, 0.0f);
  for (int s = 0; s < C; ++s) {
    if (s + 1 < C) g_.start_ring(kv, kv_next, n, kTagKvBack);
    if (s > 0) g_.start_ring(done, in, n, kTagDkv);
    k.fill(mine, n, 0.0f);
    const double t0 = thread_cpu_seconds();
    for (const RingStep::Block& b : ring_step(layout_, T, s)) {
      const kernels::AttnBlock blk = block_of(b.q, b.k, B, NHl, Tl, Cl, T, false);
      const float* kp = kv + b.k.local * 2 * Cl;
      float* dk = mine + b.k.local * 2 * Cl;
      k.attention_block_backward(dqkv + b.q.local * 3 * Cl, dk, dk + Cl, dout + b.q.local * Cl,
                                 qkv + b.q.local * 3 * Cl, kp, kp + Cl, out + b.q.local * Cl, lse + b.q.local, blk,
                                 drop, ws);
    }
    step_cpu_s_[C + s] += thread_cpu_seconds() - t0;
    if (s > 0) {
      g_.wait_ring(kTagDkv);
      k.residual_forward(mine, mine, in, n);
    }
    if (s + 1 < C) {
      g_.wait_ring(kTagKvBack);
      std::swap(kv, kv_next);
    }
    std::swap(mine, done);
  }
  g_.start_ring(done, in, n, kTagDkv);  // the last hop: every rank's own dK|dV, home
  g_.wait_ring(kTagDkv);
  k.copy_rows(dqkv + Cl, 3 * Cl, in, 2 * Cl, 2 * Cl, B * Tl);
}

template <class A>
void CpAttention::forward(const kernels::ModelOps<A>& k, A* out, float* lse, A* qkv, A* out_h, int64_t B, int64_t Tl,
                          int64_t Cl, int64_t NHl, kernels::AttnDropout drop, float* ws, A* scratch) {
  if (layout_.kind == CpKind::Ring) {
    if constexpr (std::is_same_v<A, float>) {
      ring_forward(k, out, lse, qkv, B, Tl, Cl, NHl, drop, ws, scratch);
      return;
    }
    throw ConfigError("config", "parallel.cp_kind=ring runs fp32 activations only (use train.dtype=fp32 or ulysses)");
  }
  // Ulysses. Head group g = this rank's heads [g NHc, (g + 1) NHc); rows of
  // rank i are global positions [i Tl, (i + 1) Tl).
  const int64_t C = layout_.size, T = Tl * C, NHc = NHl / C, Cc = Cl / C, n = B * Tl * 3 * Cl;
  A *send = scratch, *recv = scratch + n;
  for (int64_t g = 0; g < C; ++g)  // [B, Tl, 3, NHl, HS] -> [C(g), B, Tl, 3, NHc, HS]
    for (int64_t c = 0; c < 3; ++c)
      k.copy_rows(send + g * B * Tl * 3 * Cc + c * Cc, 3 * Cc, qkv + c * Cl + g * Cc, 3 * Cl, Cc, B * Tl);
  g_.all_to_all(send, recv, n);
  for (int64_t i = 0; i < C; ++i)  // [C(i), B, Tl, 3Cc] -> [B, C(i), Tl, 3Cc] = [B, T, 3Cc] (B > 1 needs this)
    k.copy_rows(qkv + i * Tl * 3 * Cc, T * 3 * Cc, recv + i * B * Tl * 3 * Cc, Tl * 3 * Cc, Tl * 3 * Cc, B);
  k.attention_forward(out_h, lse, qkv, B, T, Cc, NHc, ulysses_drop(drop, NHl), ws);
  for (int64_t i = 0; i < C; ++i)  // [B, C(i), Tl, Cc] -> [C(i), B, Tl, Cc]
    k.copy_rows(send + i * B * Tl * Cc, Tl * Cc, out_h + i * Tl * Cc, T * Cc, Tl * Cc, B);
  g_.all_to_all(send, recv, B * Tl * Cl);
  for (int64_t g = 0; g < C; ++g)  // [C(g), B, Tl, Cc] -> [B, Tl, Cl] at column g Cc
    k.copy_rows(out + g * Cc, Cl, recv + g * B * Tl * Cc, Cc, Cc, B * Tl);
}

template <class A>
void CpAttention::backward(const kernels::ModelOps<A>& k, A* dqkv, const A* dout, const A* qkv, const A* out,
                           const A* out_h, const float* lse, int64_t B, int64_t Tl, int64_t Cl, int64_t NHl,
                           kernels::AttnDropout drop, float* ws, A* scratch) {
  if (layout_.kind == CpKind::Ring) {
    if constexpr (std::is_same_v<A, float>) {
      ring_backward(k, dqkv, dout, qkv, out, lse, B, Tl, Cl, NHl, drop, ws, scratch);
      return;
    }
    throw ConfigError("config", "parallel.cp_kind=ring runs fp32 activations only (use train.dtype=fp32 or ulysses)");
  }
  const int64_t C = layout_.size, T = Tl * C, NHc = NHl / C, Cc = Cl / C, n = B * Tl * 3 * Cl;
  A *send = scratch, *recv = scratch + n, *dout_h = scratch + 2 * n;
  for (int64_t g = 0; g < C; ++g)  // d(out) [B, Tl, Cl] -> [C(g), B, Tl, Cc]
    k.copy_rows(send + g * B * Tl * Cc, Cc, dout + g * Cc, Cl, Cc, B * Tl);
  g_.all_to_all(send, recv, B * Tl * Cl);
  for (int64_t i = 0; i < C; ++i)  // [C(i), B, Tl, Cc] -> [B, T, Cc]
    k.copy_rows(dout_h + i * Tl * Cc, T * Cc, recv + i * B * Tl * Cc, Tl * Cc, Tl * Cc, B);
  k.attention_backward(dqkv, dout_h, qkv, out_h, lse, B, T, Cc, NHc, ulysses_drop(drop, NHl), ws);  // head form
  for (int64_t i = 0; i < C; ++i)  // [B, C(i), Tl, 3Cc] -> [C(i), B, Tl, 3Cc]
    k.copy_rows(send + i * B * Tl * 3 * Cc, Tl * 3 * Cc, dqkv + i * Tl * 3 * Cc, T * 3 * Cc, Tl * 3 * Cc, B);
  g_.all_to_all(send, recv, n);
  for (int64_t g = 0; g < C; ++g)  // [C(g), B, Tl, 3, Cc] -> [B, Tl, 3, NHl HS] at head group g
    for (int64_t c = 0; c < 3; ++c)
      k.copy_rows(dqkv + c * Cl + g * Cc, 3 * Cl, recv + g * B * Tl * 3 * Cc + c * Cc, 3 * Cc, Cc, B * Tl);
}

template void CpAttention::forward<float>(const kernels::ModelOps<float>&, float*, float*, float*, float*, int64_t,
                                          int64_t, int64_t, int64_t, kernels::AttnDropout, float*, float*);
template void CpAttention::forward<bfloat16>(const kernels::ModelOps<bfloat16>&, bfloat16*, float*, bfloat16*,
                                             bfloat16*, int64_t, int64_t, int64_t, int64_t, kernels::AttnDropout,
                                             float*, bfloat16*);
template void CpAttention::backward<float>(const kernels::ModelOps<float>&, float*, const float*, const float*,
                                           const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                           kernels::AttnDropout, float*, float*);
template void CpAttention::backward<bfloat16>(const kernels::ModelOps<bfloat16>&, bfloat16*, const bfloat16*,
                                              const bfloat16*, const bfloat16*, const bfloat16*, const float*, int64_t,
                                              int64_t, int64_t, int64_t, kernels::AttnDropout, float*, bfloat16*);

}  // namespace parallm::model
