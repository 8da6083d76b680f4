// The model's backward pass (gpt.h), chunk by chunk: from d(chunk output)
// (the loss's d(ln_f output) on the model's last chunk, a received message
// elsewhere) down to d(chunk input) (the message to the previous stage) or,
// on the first chunk, the embeddings' gradients. A zero-bubble schedule runs
// it as two halves: B (Input) computes every input gradient and the
// LayerNorms' weight gradients and keeps each linear layer's output gradient;
// W (Weight) then computes the linear layers' and the embedding's weight
// gradients from them. The kernels give each half the bits of the whole
// call, so both ways accumulate the same gradients.
#include <cstring>

#include "core/error.h"
#include "core/gpu.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/numeric_watch.h"

namespace parallm::model {

void GPT::backward(const int32_t* tokens, int64_t B, int64_t T, const StepContext& ctx) {
  PARALLM_CHECK(num_chunks() == 1 && layout_.first_stage() && layout_.last_stage(), InternalError, "gpt.backward",
                "a pipeline stage runs backward_chunk");
  backward_chunk(0, 0, tokens, B, T, ctx, BackwardPart::All);
}

void GPT::backward_chunk(int chunk, int set, const int32_t* tokens, int64_t B, int64_t T, const StepContext& ctx,
                         BackwardPart part) {
  select(chunk, set);
  SetState& st = cur_set();
  const bool weight = part == BackwardPart::Weight;
  PARALLM_CHECK(part == BackwardPart::All || pipe_.split_backward, InternalError, "gpt.backward",
                "a split backward needs PipelinePart::split_backward");
  PARALLM_CHECK((weight ? st.weights_pending : st.grads_ready) && B == st.B && T == st.T, InternalError, "gpt.backward",
                "{}",
                weight ? "the weight half needs the input half first, on the same batch"
                       : "backward needs a preceding forward with targets and need_grad on the same batch");
  st.grads_ready = false;
  st.weights_pending = part == BackwardPart::Input;
  if (!first_chunk(chunk)) tokens = nullptr;
  if (tokens && !dev_.is_cpu()) tokens = tokens_d_.data() + set * max_B_ * max_T_;  // uploaded by forward
  const auto copy = weight_copy_scope();
  const Fwd f = pass_shape(ctx, B, T);
  if (compute_ == DType::BF16) {
    if (weight)
      weight_backward(*kb_, chunk, tokens, f);
    else
      backward_impl(*kb_, chunk, tokens, f, part);
  } else {
    if (weight)
      weight_backward<float>(*k_, chunk, tokens, f);
    else
      backward_impl<float>(*k_, chunk, tokens, f, part);
  }
}

void GPT::ready(const StepContext& ctx, std::initializer_list<int64_t> offsets) const {
  if (!ctx.grads_ready) return;
  for (int64_t o : offsets)
    if (o >= 0) ctx.grads_ready(layout_.unit_at(o));
}

template <class A>
void GPT::backward_impl(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const Fwd& f,
                        BackwardPart part) {
  const StepContext& ctx = *f.ctx;
  const bool split = part == BackwardPart::Input;
  const int64_t B = f.B, T = f.T, N = f.N, Nl = f.Nl, C = cfg_.n_embd;
  const int64_t NHl = cfg_.n_head / layout_.spec().tp, Cl = C / layout_.spec().tp;
  const LayerRange r = layout_.chunks()[static_cast<size_t>(chunk)];
  // Group by group, from the last block down: W(o) / D(o) are the parameter
  // and gradient at flat offset o of the current group (D: null in B, which
  // leaves the linear layers' weight gradients to W).
  const A* P = nullptr;
  float* G = nullptr;
  int64_t p0 = 0;
  int cur = -1;
  auto enter = [&](int g) {
    if (g == cur) return;
    P = params_of<A>(g, Pass::Backward);
    G = group_grads(g);
    p0 = layout_.group(g).begin;
    cur = g;
  };
  auto W = [&](int64_t o) -> const A* { return o < 0 ? nullptr : P + (o - p0); };
  auto D = [&](int64_t o) -> float* { return o < 0 ? nullptr : G + (o - p0); };
  auto DW = [&](int64_t o) -> float* { return split ? nullptr : D(o); };  // a linear layer's weight gradient
  const float p = f.p;
  const bool sel = cfg_.recompute == Recompute::Selective, full = cfg_.recompute == Recompute::Full;
  // The shared recompute buffers still hold the last forward's last block when
  // that forward was this chunk's on this set: that block is not redone.
  const bool fresh = last_fwd_chunk_ == chunk && last_fwd_set_ == set_;
  last_fwd_chunk_ = -1;
  // d(residual stream): the set's gradient message on a pipeline stage (it
  // arrives there and leaves from there), else scratch.
  A* dres = co().grad >= 0 ? act<A>(co().grad) : scr<A>(off_.s_dres);
  A* dtmp = scr<A>(off_.s_tmp);
  A* dbig1 = scr<A>(off_.s_dfch);
  A* dbig2 = scr<A>(off_.s_dfch2);
  float* ws = ws_.data();
  // Tensor parallel: d(output) of a row-parallel linear, on all rows
  // (sequence parallel: this rank's rows gathered, scatter's backward half) ...
  auto whole_dout = [&](const A* dlocal) -> const A* {
    if (!sp_) return dlocal;
    A* whole = scr<A>(off_.s_gfull);
    scatter_backward(tp_, dlocal, whole, Nl * C);
    return whole;
  };
  // ... and a column-parallel linear's input gradient: partial sums written
  // to `partial`, then combined into dtmp (copy's or gather's backward half).
  A* partial = sp_ ? scr<A>(off_.s_gfull) : dtmp;
  auto combine_dinp = [&] {
    if (sp_)
      gather_backward(tp_, partial, dtmp, Nl * C);
    else
      copy_backward(tp_, dtmp, N * C);
  };
  // dres += LayerNorm backward over this rank's rows. Sequence parallel, the
  // weight gradients are partial sums: summed over the group, then added.
  auto ln_backward = [&](int64_t w, int64_t b, const A* dout, const A* inp, const float* mean, const float* rstd) {
    if (!sp_) {
      k.layernorm_backward(dres, D(w), D(b), dout, inp, W(w), mean, rstd, Nl, C);
      return;
    }
    float* s = stat(off_.ln_grad);
    zero_device(s, 2 * C * sizeof(float));
    k.layernorm_backward(dres, s, b >= 0 ? s + C : nullptr, dout, inp, W(w), mean, rstd, Nl, C);
    tp_->sum(s, 2 * C);
    k_->add_inplace(D(w), s, C);
    if (b >= 0) k_->add_inplace(D(b), s + C, C);
  };
  // A linear layer's output gradient, kept for W in B.
  auto keep = [&](int64_t off, const A* d, int64_t n) -> const A* {
    if (!split) return d;
    copy_device(act<A>(off), d, n * sizeof(A));
    return act<A>(off);
  };
  if (last_chunk(chunk)) {  // d(residual stream) from the final LayerNorm
    enter(layout_.num_groups() - 1);
    zero_device(dres, sizeof(A) * Nl * C);
    ln_backward(layout_.lnf_w(), layout_.lnf_b(), act<A>(co().dlnf), act<A>(off_.la[r.end - 1].res3),
                stat(co().lnf_mean), stat(co().lnf_rstd));
    if (ctx.watch) watch_grads(*ctx.watch, cfg_.n_layer, G, p0, dres, part, f);
    ready(ctx, {layout_.lnf_w(), layout_.lnf_b()});
  }  // else dres holds the received d(chunk output)
  // Gradient through a residual branch's dropout: a fresh buffer, or dres itself.
  auto through_dropout = [&](int64_t l, uint64_t site) -> const A* {
    if (p <= 0) return dres;
    dropout_rows(k, true, dtmp, dres, stream_id(kRngDropout, ctx.micro_step, l, site), f);
    return dtmp;
  };
  for (int64_t l = r.end - 1; l >= r.begin; --l) {
    const auto& a = off_.la[l];
    const auto& bp = layout_.block(l);
    const int g = layout_.group_of_block(l);
    enter(g);
    const A* x_in = l == r.begin ? act<A>(co().input) : act<A>(off_.la[l - 1].res3);
    const bool redo = !(fresh && l + 1 == r.end);
    if (full && redo) block_forward(k, l, x_in, P, p0, f);  // the block's buffers, redone from its input
    // MLP branch: res3 = res2 + drop(fcproj(gelu(fc(ln2(res2)))))
    const A* dmlp = keep(a.d_fcproj, whole_dout(through_dropout(l, kMlpResid)), N * C);
    if (sel && redo) k.gelu_forward(act<A>(a.fch_gelu), act<A>(a.fch), N * 4 * Cl, cfg_.gelu);
    k.matmul_backward(dbig2, DW(bp.fcproj_w), DW(bp.fcproj_b), dmlp, act<A>(a.fch_gelu), W(bp.fcproj_w), N, 4 * Cl, C);
    if (!split) ready(ctx, {bp.fcproj_w, bp.fcproj_b});
    A* dfc = split ? act<A>(a.d_fc) : dbig1;
    k.gelu_backward(dfc, act<A>(a.fch), dbig2, N * 4 * Cl, cfg_.gelu);
    if (sel && redo)
      k.layernorm_forward(act<A>(a.ln2), stat(a.ln2_mean), stat(a.ln2_rstd), act<A>(a.res2), W(bp.ln2_w), W(bp.ln2_b),
                          Nl, C);
    k.matmul_backward(partial, DW(bp.fc_w), DW(bp.fc_b), dfc, split ? nullptr : whole_rows(act<A>(a.ln2), N),
                      W(bp.fc_w), N, C, 4 * Cl);
    combine_dinp();
    if (!split) ready(ctx, {bp.fc_w, bp.fc_b});
    ln_backward(bp.ln2_w, bp.ln2_b, dtmp, act<A>(a.res2), stat(a.ln2_mean), stat(a.ln2_rstd));
    ready(ctx, {bp.ln2_w, bp.ln2_b});
    // Attention branch: res2 = x + drop(proj(attn(qkv(ln1(x)))))
    const A* dattn = keep(a.d_proj, whole_dout(through_dropout(l, kAttnResid)), N * C);
    k.matmul_backward(dbig1, DW(bp.proj_w), DW(bp.proj_b), dattn, act<A>(a.atty), W(bp.proj_w), N, Cl, C);
    if (!split) ready(ctx, {bp.proj_w, bp.proj_b});
    const kernels::AttnDropout ad = attn_dropout(ctx, l, p);
    A* dqkv = split ? act<A>(a.d_qkv) : dbig2;
    if (cpa_)
      cpa_->backward(k, dqkv, dbig1, act<A>(a.qkv), act<A>(a.atty), a.att_h >= 0 ? act<A>(a.att_h) : nullptr,
                     stat(a.lse), B, T, Cl, NHl, ad, ws, scr<A>(off_.s_cp));
    else
      k.attention_backward(dqkv, dbig1, act<A>(a.qkv), act<A>(a.atty), stat(a.lse), B, T, Cl, NHl, ad, ws);
    if (sel && redo)
      k.layernorm_forward(act<A>(a.ln1), stat(a.ln1_mean), stat(a.ln1_rstd), x_in, W(bp.ln1_w), W(bp.ln1_b), Nl, C);
    k.matmul_backward(partial, DW(bp.qkv_w), DW(bp.qkv_b), dqkv, split ? nullptr : whole_rows(act<A>(a.ln1), N),
                      W(bp.qkv_w), N, C, 3 * Cl);
    combine_dinp();
    if (!split) ready(ctx, {bp.qkv_w, bp.qkv_b});
    ln_backward(bp.ln1_w, bp.ln1_b, dtmp, x_in, stat(a.ln1_mean), stat(a.ln1_rstd));
    ready(ctx, {bp.ln1_w, bp.ln1_b});
    if (ctx.watch) watch_grads(*ctx.watch, l, G, p0, dres, part, f);
    if (!split) group_grads_done(g);
    release_group(g, Pass::Backward);
  }
  // dres now holds d(chunk input): the message to the previous stage, or on
  // the first chunk d(embedding output), which W takes from there in a split backward.
  if (!first_chunk(chunk) || split) return;
  embedding_backward(k, dres, tokens, f);
  ready(ctx, {layout_.wpe(), layout_.wte()});
  group_grads_done(0);
}

template <class A>
void GPT::weight_backward(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const Fwd& f) {
  const int64_t N = f.N, C = cfg_.n_embd, Cl = C / layout_.spec().tp;
  const LayerRange r = layout_.chunks()[static_cast<size_t>(chunk)];
  for (int64_t l = r.end - 1; l >= r.begin; --l) {
    const auto& a = off_.la[l];
    const auto& bp = layout_.block(l);
    const int g = layout_.group_of_block(l);
    const A* P = params_of<A>(g, Pass::Backward);
    float* G = group_grads(g);
    const int64_t p0 = layout_.group(g).begin;
    auto W = [&](int64_t o) -> const A* { return o < 0 ? nullptr : P + (o - p0); };
    auto D = [&](int64_t o) -> float* { return o < 0 ? nullptr : G + (o - p0); };
    k.matmul_backward(nullptr, D(bp.fcproj_w), D(bp.fcproj_b), act<A>(a.d_fcproj), act<A>(a.fch_gelu), W(bp.fcproj_w),
                      N, 4 * Cl, C);
    k.matmul_backward(nullptr, D(bp.fc_w), D(bp.fc_b), act<A>(a.d_fc), whole_rows(act<A>(a.ln2), N), W(bp.fc_w), N, C,
                      4 * Cl);
    k.matmul_backward(nullptr, D(bp.proj_w), D(bp.proj_b), act<A>(a.d_proj), act<A>(a.atty), W(bp.proj_w), N, Cl, C);
    k.matmul_backward(nullptr, D(bp.qkv_w), D(bp.qkv_b), act<A>(a.d_qkv), whole_rows(act<A>(a.ln1), N), W(bp.qkv_w), N,
                      C, 3 * Cl);
    if (f.ctx->watch) watch_grads<A>(*f.ctx->watch, l, G, p0, nullptr, BackwardPart::Weight, f);
    ready(*f.ctx, {bp.fcproj_w, bp.fcproj_b, bp.fc_w, bp.fc_b, bp.proj_w, bp.proj_b, bp.qkv_w, bp.qkv_b});
    group_grads_done(g);
    release_group(g, Pass::Backward);
  }
  if (!first_chunk(chunk)) return;
  embedding_backward(k, act<A>(co().grad), tokens, f);
  ready(*f.ctx, {layout_.wpe(), layout_.wte()});
  group_grads_done(0);
}

template <class A>
void GPT::embedding_backward(const kernels::ModelOps<A>& k, const A* demb, const int32_t* tokens, const Fwd& f) {
  const int64_t Nl = f.Nl, C = cfg_.n_embd;
  const StepContext& ctx = *f.ctx;
  if (f.p > 0) {
    A* dtmp = scr<A>(off_.s_tmp);
    dropout_rows(k, true, dtmp, demb, stream_id(kRngDropout, ctx.micro_step, cfg_.n_layer, kEmbed), f);
    demb = dtmp;
  }
  float* GE = group_grads(0);
  const int64_t e0 = layout_.group(0).begin;
  if (tp_) {  // demb is whole on every rank: each adds its vocabulary rows' part; wpe's gradient is the same everywhere
    const auto vr = layout_.vocab_rows();
    const A* whole = demb;
    if (sp_) {
      A* w = scr<A>(off_.s_gfull);
      scatter_backward(tp_, demb, w, Nl * C);
      whole = w;
    }
    for_position_runs(f, [&](int64_t row, int64_t pos, int64_t Bn, int64_t Tn) {
      k.vp_embedding_backward(GE + (layout_.wte() - e0), GE + (layout_.wpe() - e0) + pos * C, whole + row * C,
                              tokens + row, Bn, Tn, C, vr.v0, vr.rows);
    });
  } else {
    for_position_runs(f, [&](int64_t row, int64_t pos, int64_t Bn, int64_t Tn) {
      k.embedding_backward(GE + (layout_.wte() - e0), GE + (layout_.wpe() - e0) + pos * C, demb + row * C, tokens + row,
                           Bn, Tn, C);
    });
  }
  if (ctx.watch) watch_embed_grads(*ctx.watch, GE, e0, f);
}

void GPT::copy_device(void* dst, const void* src, size_t bytes) const {
  if (dst == src) return;
  if (dev_.is_cpu())
    std::memcpy(dst, src, bytes);
  else
    gpu::memcpy_d2d(dst, src, bytes);
}

}  // namespace parallm::model
