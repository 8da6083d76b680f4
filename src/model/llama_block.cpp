// The Llama family's block (llama_block.h), written with its layers; like
// gpt2_block.cpp it reads as the one-rank block (.ci/check-shape keeps the
// run's layout out of it). Backward runs whole or as a zero-bubble schedule's
// input half, keeping each linear layer's output gradient for the weight half.
#include "model/llama_block.h"

#include "core/rng.h"
#include "kernels/ops.h"

namespace parallm::model {

LlamaBlock::LlamaBlock(const BlockParams& bp, const GPTConfig& cfg, const BlockWidths& w, const Attention& attn,
                       const MoeLayer& moe)
    : bp_(bp),
      H_(w.heads),
      KV_(w.kv_heads),
      D_(w.D),
      kv_whole_(w.kv_whole),
      kv_total_(cfg.kv_heads()),
      first_kv_(w.first_kv) {
  const int64_t C = w.C, A = w.attn(), K = w.kv(), F = w.mlp;
  const float eps = cfg.rms_norm_eps;
  // Whole k and v slots: the rows (and bias entries) of the KV head this rank uses.
  auto head_rows = [&](int64_t o, int64_t per_head) { return o < 0 || !kv_whole_ ? o : o + w.first_kv * per_head; };
  Layers& L = layers_;
  L.ln1 = Norm{bp.ln1_w, -1, C, true, eps};
  L.ln2 = Norm{bp.ln2_w, -1, C, true, eps};
  L.q_norm = Norm{bp.q_norm, -1, w.D, true, eps};
  L.k_norm = Norm{bp.k_norm, -1, w.D, true, eps};
  L.qkv.n = 3;
  L.qkv.l[0] = {bp.qkv_w, bp.qkv_b, C, A};
  L.qkv.l[1] = {head_rows(bp.k_w, w.D * C), head_rows(bp.k_b, w.D), C, K, kv_whole_};
  L.qkv.l[2] = {head_rows(bp.v_w, w.D * C), head_rows(bp.v_b, w.D), C, K, kv_whole_};
  L.gate_up.n = 2;
  L.gate_up.l[0] = {bp.fc_w, -1, C, F};
  L.gate_up.l[1] = {bp.up_w, -1, C, F};
  L.attn = attn;
  L.proj = {bp.proj_w, -1, A, C};
  L.down = {bp.fcproj_w, -1, F, C};
  moe_ = moe.active();
  L.moe = moe;
}

void LlamaBlock::report_linear(const BlockEnv& e, const StepContext& ctx) const {
  if (!moe_) e.ready(ctx, {bp_.fcproj_w, bp_.fc_w, bp_.up_w});  // an MoE layer's are final after the input half
  e.ready(ctx, {bp_.proj_w, bp_.qkv_w, bp_.qkv_b, bp_.k_w, bp_.k_b, bp_.v_w, bp_.v_b});
}

template <class A>
void LlamaBlock::attention_input(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const ParamView<A>& P,
                                 const PassShape& f) const {
  const auto& a = e.acts.layer(l);
  const Layers& L = layers_;
  const int64_t N = f.N, Aw = H_ * D_, K = KV_ * D_;
  A* r = e.acts.scr<A>(e.acts.plan().s_qkvr);
  // QK-norm keeps its inputs (q | k) for backward; v, and q and k without it, are transient.
  A* pre = a.qk_pre >= 0 ? e.acts.act<A>(a.qk_pre) : r;
  A* q = pre;
  A* kk = pre + N * Aw;
  A* v = r + N * (Aw + K);
  A* const out[3] = {q, kk, v};
  L.qkv.forward(k, e.split, out, e.acts.act<A>(a.ln1), P, N);
  const A* qs = q;
  const A* ks = kk;
  if (a.qk_pre >= 0) {
    A* qn = e.acts.scr<A>(e.acts.plan().s_qkn);
    float* rstd = e.acts.stat(a.qk_rstd);
    L.q_norm.forward(k, qn, nullptr, rstd, q, P, N * H_);
    L.k_norm.forward(k, qn + N * Aw, nullptr, rstd + N * H_, kk, P, N * KV_);
    qs = qn;
    ks = qn + N * Aw;
  }
  k.rope_pack_forward(e.acts.act<A>(a.qkv), qs, ks, v, f.rope, f.B, f.T, H_, KV_, D_);
}

template <class A>
void LlamaBlock::forward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
                         const PassShape& f) const {
  const auto& a = e.acts.layer(l);
  const Layers& L = layers_;
  const int64_t N = f.N, Nl = f.Nl, F = L.down.in;
  auto stream = [&](uint64_t site) { return stream_id(kRngDropout, f.ctx->micro_step, l, site); };
  A* tmp = e.acts.scr<A>(e.acts.plan().s_tmp);
  L.ln1.forward(k, e.acts.act<A>(a.ln1), nullptr, e.acts.stat(a.ln1_rstd), x, P, Nl);
  attention_input(k, e, l, P, f);
  L.attn.forward(k, l, e.acts.act<A>(a.atty), e.acts.stat(a.lse), e.acts.act<A>(a.qkv),
                 a.att_h >= 0 ? e.acts.act<A>(a.att_h) : nullptr, f, stream(kAttnProbs), e.acts.ws(),
                 e.acts.scr<A>(e.acts.plan().s_cp));
  L.proj.forward_residual(k, e.split, e.acts.act<A>(a.res2), x, e.acts.act<A>(a.atty), P, tmp, f, stream(kAttnResid));
  L.ln2.forward(k, e.acts.act<A>(a.ln2), nullptr, e.acts.stat(a.ln2_rstd), e.acts.act<A>(a.res2), P, Nl);
  if (moe_) {
    L.moe.forward(k, e, l, e.acts.act<A>(a.res3), e.acts.act<A>(a.res2), e.acts.act<A>(a.ln2), P, f, stream(kMlpResid));
    return;
  }
  A* const gu[2] = {e.acts.act<A>(a.fch), e.acts.act<A>(a.up)};
  L.gate_up.forward(k, e.split, gu, e.acts.act<A>(a.ln2), P, N);
  k.swiglu_forward(e.acts.act<A>(a.fch_gelu), gu[0], gu[1], N * F);
  L.down.forward_residual(k, e.split, e.acts.act<A>(a.res3), e.acts.act<A>(a.res2), e.acts.act<A>(a.fch_gelu), P, tmp,
                          f, stream(kMlpResid));
}

template <class A>
void LlamaBlock::sum_kv_grads(const kernels::ModelOps<A>& k, const BlockEnv& e, const A* const* dkv, const A* x,
                              const ParamView<A>& P, const GradView& G, int64_t N) const {
  // Each rank's k and v weight gradients cover its KV head's rows from its own
  // query heads only: computed into the whole slots' shape (zero elsewhere),
  // summed over the group, then added whole, so every replica takes the same update.
  const ColumnLinear* kv = layers_.qkv.l + 1;
  const int64_t C = kv[0].in, Dn = kv[0].out, rows = kv_total_ * Dn, per = rows * C + rows;
  const int64_t slot_w[2] = {bp_.k_w, bp_.v_w}, slot_b[2] = {bp_.k_b, bp_.v_b};
  float* g = e.acts.stat(e.acts.plan().kv_grad);
  e.fp32.fill(g, 2 * per, 0.0f);
  const A* whole = e.split.whole_rows(x, N);
  for (int i = 0; i < 2; ++i) {
    float* gw = g + i * per + first_kv_ * Dn * C;
    float* gb = kv[i].b >= 0 ? g + i * per + rows * C + first_kv_ * Dn : nullptr;
    k.matmul_backward(nullptr, gw, gb, dkv[i], whole, P.at(kv[i].w), N, C, Dn);
  }
  e.split.group()->sum(g, 2 * per);
  for (int i = 0; i < 2; ++i) {
    e.fp32.add_inplace(G.at(slot_w[i]), g + i * per, rows * C);
    if (slot_b[i] >= 0) e.fp32.add_inplace(G.at(slot_b[i]), g + i * per + rows * C, rows);
  }
}

template <class A>
void LlamaBlock::attention_input_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l,
                                          const ParamView<A>& P, const GradView& G, const PassShape& f, const A* dqkv,
                                          A* dx) const {
  const auto& a = e.acts.layer(l);
  const Layers& L = layers_;
  const int64_t N = f.N, Aw = H_ * D_, K = KV_ * D_;
  const bool split = !G.weights;
  // d(q | k | v) before RoPE and the expansion: kept for the weight half, or transient.
  A* d = split ? e.acts.act<A>(a.d_qkv) : e.acts.scr<A>(e.acts.plan().s_qkvr);
  k.rope_pack_backward(d, d + N * Aw, d + N * (Aw + K), dqkv, f.rope, f.B, f.T, H_, KV_, D_);
  if (a.qk_pre >= 0) {  // through QK-norm: its weight gradients are partial over this rank's heads
    A* dpre = e.acts.scr<A>(e.acts.plan().s_qkn);
    k.fill(dpre, N * (Aw + K), 0.0f);
    const A* pre = e.acts.act<A>(a.qk_pre);
    const float* rstd = e.acts.stat(a.qk_rstd);
    float* stats = e.acts.stat(e.acts.plan().ln_grad);
    L.q_norm.backward(k, e.split, dpre, d, pre, P, G, nullptr, rstd, N * H_, e.fp32, e.dev, stats, true);
    L.k_norm.backward(k, e.split, dpre + N * Aw, d + N * Aw, pre + N * Aw, P, G, nullptr, rstd + N * H_, N * KV_,
                      e.fp32, e.dev, stats, true);
    e.ready(*f.ctx, {bp_.q_norm, bp_.k_norm});
    e.copy(d, dpre, static_cast<size_t>(N * (Aw + K)) * sizeof(A));
  }
  const A* const dy[3] = {d, d + N * Aw, d + N * (Aw + K)};
  L.qkv.backward(k, e.split, dx, dy, e.acts.act<A>(a.ln1), P, G, N, e.acts.scr<A>(e.acts.plan().s_dx2));
  if (!split && kv_whole_) sum_kv_grads(k, e, dy + 1, e.acts.act<A>(a.ln1), P, G, N);
  if (!split) e.ready(*f.ctx, {bp_.qkv_w, bp_.qkv_b, bp_.k_w, bp_.k_b, bp_.v_w, bp_.v_b});
}

template <class A>
void LlamaBlock::backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x,
                          const ParamView<A>& P, const GradView& G, const PassShape& f, bool redo, A* dres) const {
  const StepContext& ctx = *f.ctx;
  const auto& a = e.acts.layer(l);
  const Layers& L = layers_;
  const int64_t N = f.N, Nl = f.Nl, C = L.ln1.C, F = L.down.in;
  const bool split = !G.weights;
  const bool sel = e.recompute == Recompute::Selective, full = e.recompute == Recompute::Full;
  const BackwardScratch<A> s{e, f, l, split};
  A* const dtmp = s.dtmp;
  A* const dbig1 = s.dbig1;
  A* const dbig2 = s.dbig2;
  auto linear_ready = [&](std::initializer_list<int64_t> offsets) {
    if (!split) e.ready(ctx, offsets);
  };
  if (full && redo) forward(k, e, l, x, P, f);
  // The MLP branch.
  if (moe_) {
    if (sel && redo)
      L.ln2.forward(k, e.acts.act<A>(a.ln2), nullptr, e.acts.stat(a.ln2_rstd), e.acts.act<A>(a.res2), P, Nl);
    L.moe.backward(k, e, l, dtmp, e.split.whole_grad(s.through_dropout(k, dres, kMlpResid), N), e.acts.act<A>(a.ln2), P,
                   G, f);
    L.moe.report(e, ctx);
  } else {
    const A* dmlp = s.keep(a.d_fcproj, L.down.whole_dy(e.split, s.through_dropout(k, dres, kMlpResid), N), N * C);
    if (sel && redo) k.swiglu_forward(e.acts.act<A>(a.fch_gelu), e.acts.act<A>(a.fch), e.acts.act<A>(a.up), N * F);
    L.down.backward(k, e.split, dbig2, dmlp, e.acts.act<A>(a.fch_gelu), P, G, N);
    linear_ready({bp_.fcproj_w});
    A* dgate = split ? e.acts.act<A>(a.d_fc) : dbig1;
    A* dup = split ? e.acts.act<A>(a.d_up) : dbig2;  // may alias its input, d(SwiGLU output)
    k.swiglu_backward(dgate, dup, dbig2, e.acts.act<A>(a.fch), e.acts.act<A>(a.up), N * F);
    if (sel && redo)
      L.ln2.forward(k, e.acts.act<A>(a.ln2), nullptr, e.acts.stat(a.ln2_rstd), e.acts.act<A>(a.res2), P, Nl);
    const A* const dgu[2] = {dgate, dup};
    L.gate_up.backward(k, e.split, dtmp, dgu, e.acts.act<A>(a.ln2), P, G, N, e.acts.scr<A>(e.acts.plan().s_dx2));
    linear_ready({bp_.fc_w, bp_.up_w});
  }
  L.ln2.backward(k, e.split, dres, dtmp, e.acts.act<A>(a.res2), P, G, nullptr, e.acts.stat(a.ln2_rstd), Nl, e.fp32,
                 e.dev, s.ln_stats);
  e.ready(ctx, {bp_.ln2_w});
  // The attention branch.
  const A* dattn = s.keep(a.d_proj, L.proj.whole_dy(e.split, s.through_dropout(k, dres, kAttnResid), N), N * C);
  L.proj.backward(k, e.split, dbig1, dattn, e.acts.act<A>(a.atty), P, G, N);
  linear_ready({bp_.proj_w});
  L.attn.backward(k, dbig2, dbig1, e.acts.act<A>(a.qkv), e.acts.act<A>(a.atty),
                  a.att_h >= 0 ? e.acts.act<A>(a.att_h) : nullptr, e.acts.stat(a.lse), f, s.stream(kAttnProbs),
                  e.acts.ws(), e.acts.scr<A>(e.acts.plan().s_cp));
  if (sel && redo) L.ln1.forward(k, e.acts.act<A>(a.ln1), nullptr, e.acts.stat(a.ln1_rstd), x, P, Nl);
  attention_input_backward(k, e, l, P, G, f, dbig2, dtmp);
  L.ln1.backward(k, e.split, dres, dtmp, x, P, G, nullptr, e.acts.stat(a.ln1_rstd), Nl, e.fp32, e.dev, s.ln_stats);
  e.ready(ctx, {bp_.ln1_w});
}

template <class A>
void LlamaBlock::weight_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const ParamView<A>& P,
                                 const GradView& G, const PassShape& f) const {
  const auto& a = e.acts.layer(l);
  const Layers& L = layers_;
  const int64_t N = f.N, Aw = H_ * D_, K = KV_ * D_;
  if (!moe_) {  // an MoE layer computed its weight gradients in the input half
    L.down.weight_backward(k, e.split, e.acts.act<A>(a.d_fcproj), e.acts.act<A>(a.fch_gelu), P, G, N);
    const A* const dgu[2] = {e.acts.act<A>(a.d_fc), e.acts.act<A>(a.d_up)};
    L.gate_up.weight_backward(k, e.split, dgu, e.acts.act<A>(a.ln2), P, G, N);
  }
  L.proj.weight_backward(k, e.split, e.acts.act<A>(a.d_proj), e.acts.act<A>(a.atty), P, G, N);
  const A* d = e.acts.act<A>(a.d_qkv);
  const A* const dy[3] = {d, d + N * Aw, d + N * (Aw + K)};
  L.qkv.weight_backward(k, e.split, dy, e.acts.act<A>(a.ln1), P, G, N);
  if (kv_whole_) sum_kv_grads(k, e, dy + 1, e.acts.act<A>(a.ln1), P, G, N);
}

#define PARALLM_BLOCK(A)                                                                                         \
  template void LlamaBlock::forward<A>(const kernels::ModelOps<A>&, const BlockEnv&, int64_t, const A*,          \
                                       const ParamView<A>&, const PassShape&) const;                             \
  template void LlamaBlock::backward<A>(const kernels::ModelOps<A>&, const BlockEnv&, int64_t, const A*,         \
                                        const ParamView<A>&, const GradView&, const PassShape&, bool, A*) const; \
  template void LlamaBlock::weight_backward<A>(const kernels::ModelOps<A>&, const BlockEnv&, int64_t,            \
                                               const ParamView<A>&, const GradView&, const PassShape&) const;
PARALLM_BLOCK(float)
PARALLM_BLOCK(bfloat16)
#undef PARALLM_BLOCK

}  // namespace parallm::model
