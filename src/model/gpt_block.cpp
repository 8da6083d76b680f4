// A GPT-2 transformer block's passes, written with its layers (layers.h):
//   res2 = x + drop(proj(attn(qkv(ln1(x)))))
//   res3 = res2 + drop(fcproj(gelu(fc(ln2(res2)))))
// The layers own every split of the run (tensor, sequence, context), so this
// file reads as the one-rank block; .ci/check-shape keeps it free of them.
// Backward runs whole or as a zero-bubble schedule's input half (G hides the
// linear layers' weight gradients; each of their output gradients is kept for
// the weight half, block_weight_backward).
#include "core/rng.h"
#include "kernels/ops.h"
#include "model/gpt.h"

namespace parallm::model {

template <class A>
void GPT::block_forward(const kernels::ModelOps<A>& k, int64_t l, const A* x, const ParamView<A>& P,
                        const PassShape& f) {
  const auto& a = acts_.layer(l);
  const BlockLayers& b = blocks_[static_cast<size_t>(l)];
  const int64_t N = f.N, Nl = f.Nl;
  auto stream = [&](uint64_t site) { return stream_id(kRngDropout, f.ctx->micro_step, l, site); };
  A* tmp = acts_.scr<A>(acts_.plan().s_tmp);
  b.ln1.forward(k, acts_.act<A>(a.ln1), acts_.stat(a.ln1_mean), acts_.stat(a.ln1_rstd), x, P, Nl);
  b.qkv.forward(k, split_, acts_.act<A>(a.qkv), acts_.act<A>(a.ln1), P, N);
  b.attn.forward(k, acts_.act<A>(a.atty), acts_.stat(a.lse), acts_.act<A>(a.qkv),
                 a.att_h >= 0 ? acts_.act<A>(a.att_h) : nullptr, f, stream(kAttnProbs), acts_.ws(),
                 acts_.scr<A>(acts_.plan().s_cp));
  b.proj.forward_residual(k, split_, acts_.act<A>(a.res2), x, acts_.act<A>(a.atty), P, tmp, f, stream(kAttnResid));
  b.ln2.forward(k, acts_.act<A>(a.ln2), acts_.stat(a.ln2_mean), acts_.stat(a.ln2_rstd), acts_.act<A>(a.res2), P, Nl);
  b.fc.forward(k, split_, acts_.act<A>(a.fch), acts_.act<A>(a.ln2), P, N);
  k.gelu_forward(acts_.act<A>(a.fch_gelu), acts_.act<A>(a.fch), N * b.fc.out, cfg_.gelu);
  b.fcproj.forward_residual(k, split_, acts_.act<A>(a.res3), acts_.act<A>(a.res2), acts_.act<A>(a.fch_gelu), P, tmp, f,
                            stream(kMlpResid));
}

template <class A>
void GPT::block_backward(const kernels::ModelOps<A>& k, int64_t l, const A* x, const ParamView<A>& P, const GradView& G,
                         const PassShape& f, bool redo, A* dres) {
  const StepContext& ctx = *f.ctx;
  const auto& a = acts_.layer(l);
  const BlockLayers& b = blocks_[static_cast<size_t>(l)];
  const int64_t N = f.N, Nl = f.Nl, C = cfg_.n_embd;
  const bool split = !G.weights;
  const bool sel = cfg_.recompute == Recompute::Selective, full = cfg_.recompute == Recompute::Full;
  A* dtmp = acts_.scr<A>(acts_.plan().s_tmp);
  A* dbig1 = acts_.scr<A>(acts_.plan().s_dfch);
  A* dbig2 = acts_.scr<A>(acts_.plan().s_dfch2);
  float* ln_stats = acts_.stat(acts_.plan().ln_grad);
  auto stream = [&](uint64_t site) { return stream_id(kRngDropout, ctx.micro_step, l, site); };
  // Gradient through a residual branch's dropout: a fresh buffer, or dres itself.
  auto through_dropout = [&](uint64_t site) -> const A* {
    if (f.p <= 0) return dres;
    f.dropout_rows(k, true, dtmp, dres, stream(site));
    return dtmp;
  };
  // A linear layer's output gradient, kept for the weight half.
  auto keep = [&](int64_t off, const A* d, int64_t n) -> const A* {
    if (!split) return d;
    copy_device(acts_.act<A>(off), d, n * sizeof(A));
    return acts_.act<A>(off);
  };
  auto linear_ready = [&](int64_t w, int64_t bias) {
    if (!split) ready(ctx, {w, bias});
  };
  if (full && redo) block_forward(k, l, x, P, f);  // the block's buffers, redone from its input
  // The MLP branch.
  const A* dmlp = keep(a.d_fcproj, b.fcproj.whole_dy(split_, through_dropout(kMlpResid), N), N * C);
  if (sel && redo) k.gelu_forward(acts_.act<A>(a.fch_gelu), acts_.act<A>(a.fch), N * b.fc.out, cfg_.gelu);
  b.fcproj.backward(k, dbig2, dmlp, acts_.act<A>(a.fch_gelu), P, G, N);
  linear_ready(b.fcproj.w, b.fcproj.b);
  A* dfc = split ? acts_.act<A>(a.d_fc) : dbig1;
  k.gelu_backward(dfc, acts_.act<A>(a.fch), dbig2, N * b.fc.out, cfg_.gelu);
  if (sel && redo)
    b.ln2.forward(k, acts_.act<A>(a.ln2), acts_.stat(a.ln2_mean), acts_.stat(a.ln2_rstd), acts_.act<A>(a.res2), P, Nl);
  b.fc.backward(k, split_, dtmp, dfc, acts_.act<A>(a.ln2), P, G, N);
  linear_ready(b.fc.w, b.fc.b);
  b.ln2.backward(k, split_, dres, dtmp, acts_.act<A>(a.res2), P, G, acts_.stat(a.ln2_mean), acts_.stat(a.ln2_rstd), Nl,
                 *k_, dev_, ln_stats);
  ready(ctx, {b.ln2.w, b.ln2.b});
  // The attention branch.
  const A* dattn = keep(a.d_proj, b.proj.whole_dy(split_, through_dropout(kAttnResid), N), N * C);
  b.proj.backward(k, dbig1, dattn, acts_.act<A>(a.atty), P, G, N);
  linear_ready(b.proj.w, b.proj.b);
  A* dqkv = split ? acts_.act<A>(a.d_qkv) : dbig2;
  b.attn.backward(k, dqkv, dbig1, acts_.act<A>(a.qkv), acts_.act<A>(a.atty),
                  a.att_h >= 0 ? acts_.act<A>(a.att_h) : nullptr, acts_.stat(a.lse), f, stream(kAttnProbs), acts_.ws(),
                  acts_.scr<A>(acts_.plan().s_cp));
  if (sel && redo) b.ln1.forward(k, acts_.act<A>(a.ln1), acts_.stat(a.ln1_mean), acts_.stat(a.ln1_rstd), x, P, Nl);
  b.qkv.backward(k, split_, dtmp, dqkv, acts_.act<A>(a.ln1), P, G, N);
  linear_ready(b.qkv.w, b.qkv.b);
  b.ln1.backward(k, split_, dres, dtmp, x, P, G, acts_.stat(a.ln1_mean), acts_.stat(a.ln1_rstd), Nl, *k_, dev_,
                 ln_stats);
  ready(ctx, {b.ln1.w, b.ln1.b});
}

template <class A>
void GPT::block_weight_backward(const kernels::ModelOps<A>& k, int64_t l, const ParamView<A>& P, const GradView& G,
                                const PassShape& f) {
  const auto& a = acts_.layer(l);
  const BlockLayers& b = blocks_[static_cast<size_t>(l)];
  const int64_t N = f.N;
  b.fcproj.weight_backward(k, acts_.act<A>(a.d_fcproj), acts_.act<A>(a.fch_gelu), P, G, N);
  b.fc.weight_backward(k, split_, acts_.act<A>(a.d_fc), acts_.act<A>(a.ln2), P, G, N);
  b.proj.weight_backward(k, acts_.act<A>(a.d_proj), acts_.act<A>(a.atty), P, G, N);
  b.qkv.weight_backward(k, split_, acts_.act<A>(a.d_qkv), acts_.act<A>(a.ln1), P, G, N);
  if (f.ctx->watch) watch_grads<A>(*f.ctx->watch, l, G.base, G.begin, nullptr, BackwardPart::Weight, f);
  ready(*f.ctx, {b.fcproj.w, b.fcproj.b, b.fc.w, b.fc.b, b.proj.w, b.proj.b, b.qkv.w, b.qkv.b});
}

#define PARALLM_BLOCK(A)                                                                                    \
  template void GPT::block_forward<A>(const kernels::ModelOps<A>&, int64_t, const A*, const ParamView<A>&,  \
                                      const PassShape&);                                                    \
  template void GPT::block_backward<A>(const kernels::ModelOps<A>&, int64_t, const A*, const ParamView<A>&, \
                                       const GradView&, const PassShape&, bool, A*);                        \
  template void GPT::block_weight_backward<A>(const kernels::ModelOps<A>&, int64_t, const ParamView<A>&,    \
                                              const GradView&, const PassShape&);
PARALLM_BLOCK(float)
PARALLM_BLOCK(bfloat16)
#undef PARALLM_BLOCK

}  // namespace parallm::model
