// GPT-2's transformer block (gpt2_block.h), written with its layers:
//   res2 = x + drop(proj(attn(qkv(ln1(x)))))
//   res3 = res2 + drop(fcproj(gelu(fc(ln2(res2)))))
// The layers own every split of the run (tensor, sequence, context), so this
// file reads as the one-rank block; .ci/check-shape keeps it free of them.
// Backward runs whole or as a zero-bubble schedule's input half (G hides the
// linear layers' weight gradients; each of their output gradients is kept for
// the weight half, weight_backward).
#include "model/gpt2_block.h"

#include <cstring>

#include "core/gpu.h"
#include "core/rng.h"
#include "kernels/ops.h"

namespace parallm::model {

void BlockEnv::copy(void* dst, const void* src, size_t bytes) const {
  if (dst == src) return;
  if (dev.is_cpu())
    std::memcpy(dst, src, bytes);
  else
    gpu::memcpy_d2d(dst, src, bytes);
}

void BlockEnv::ready(const StepContext& ctx, std::initializer_list<int64_t> offsets) const {
  if (!ctx.grads_ready) return;
  for (int64_t o : offsets)
    if (o >= 0) ctx.grads_ready(layout->unit_at(o));
}

Gpt2Block::Gpt2Block(const BlockParams& bp, int64_t C, int64_t Cl, const Attention& attn)
    : layers_{.ln1 = {bp.ln1_w, bp.ln1_b, C},
              .ln2 = {bp.ln2_w, bp.ln2_b, C},
              .qkv = {bp.qkv_w, bp.qkv_b, C, 3 * Cl},
              .fc = {bp.fc_w, bp.fc_b, C, 4 * Cl},
              .attn = attn,
              .proj = {bp.proj_w, bp.proj_b, Cl, C},
              .fcproj = {bp.fcproj_w, bp.fcproj_b, 4 * Cl, C}} {}

template <class A>
void Gpt2Block::forward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
                        const PassShape& f) const {
  const auto& a = e.acts.layer(l);
  const Layers& b = layers_;
  const int64_t N = f.N, Nl = f.Nl;
  auto stream = [&](uint64_t site) { return stream_id(kRngDropout, f.ctx->micro_step, l, site); };
  A* tmp = e.acts.scr<A>(e.acts.plan().s_tmp);
  b.ln1.forward(k, e.acts.act<A>(a.ln1), e.acts.stat(a.ln1_mean), e.acts.stat(a.ln1_rstd), x, P, Nl);
  b.qkv.forward(k, e.split, e.acts.act<A>(a.qkv), e.acts.act<A>(a.ln1), P, N);
  b.attn.forward(k, l, e.acts.act<A>(a.atty), e.acts.stat(a.lse), e.acts.act<A>(a.qkv),
                 a.att_h >= 0 ? e.acts.act<A>(a.att_h) : nullptr, f, stream(kAttnProbs), e.acts.ws(),
                 e.acts.scr<A>(e.acts.plan().s_cp));
  b.proj.forward_residual(k, e.split, e.acts.act<A>(a.res2), x, e.acts.act<A>(a.atty), P, tmp, f, stream(kAttnResid));
  b.ln2.forward(k, e.acts.act<A>(a.ln2), e.acts.stat(a.ln2_mean), e.acts.stat(a.ln2_rstd), e.acts.act<A>(a.res2), P,
                Nl);
  b.fc.forward(k, e.split, e.acts.act<A>(a.fch), e.acts.act<A>(a.ln2), P, N);
  k.gelu_forward(e.acts.act<A>(a.fch_gelu), e.acts.act<A>(a.fch), N * b.fc.out, e.gelu);
  b.fcproj.forward_residual(k, e.split, e.acts.act<A>(a.res3), e.acts.act<A>(a.res2), e.acts.act<A>(a.fch_gelu), P, tmp,
                            f, stream(kMlpResid));
}

template <class A>
void Gpt2Block::backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
                         const GradView& G, const PassShape& f, bool redo, A* dres) const {
  const StepContext& ctx = *f.ctx;
  const auto& a = e.acts.layer(l);
  const Layers& b = layers_;
  const int64_t N = f.N, Nl = f.Nl, C = b.ln1.C;
  const bool split = !G.weights;
  const bool sel = e.recompute == Recompute::Selective, full = e.recompute == Recompute::Full;
  const BackwardScratch<A> s{e, f, l, split};
  A* const dtmp = s.dtmp;
  A* const dbig1 = s.dbig1;
  A* const dbig2 = s.dbig2;
  auto linear_ready = [&](int64_t w, int64_t bias) {
    if (!split) e.ready(ctx, {w, bias});
  };
  if (full && redo) forward(k, e, l, x, P, f);  // the block's buffers, redone from its input
  // The MLP branch.
  const A* dmlp = s.keep(a.d_fcproj, b.fcproj.whole_dy(e.split, s.through_dropout(k, dres, kMlpResid), N), N * C);
  if (sel && redo) k.gelu_forward(e.acts.act<A>(a.fch_gelu), e.acts.act<A>(a.fch), N * b.fc.out, e.gelu);
  b.fcproj.backward(k, e.split, dbig2, dmlp, e.acts.act<A>(a.fch_gelu), P, G, N);
  linear_ready(b.fcproj.w, b.fcproj.b);
  A* dfc = split ? e.acts.act<A>(a.d_fc) : dbig1;
  k.gelu_backward(dfc, e.acts.act<A>(a.fch), dbig2, N * b.fc.out, e.gelu);
  if (sel && redo)
    b.ln2.forward(k, e.acts.act<A>(a.ln2), e.acts.stat(a.ln2_mean), e.acts.stat(a.ln2_rstd), e.acts.act<A>(a.res2), P,
                  Nl);
  b.fc.backward(k, e.split, dtmp, dfc, e.acts.act<A>(a.ln2), P, G, N);
  linear_ready(b.fc.w, b.fc.b);
  b.ln2.backward(k, e.split, dres, dtmp, e.acts.act<A>(a.res2), P, G, e.acts.stat(a.ln2_mean), e.acts.stat(a.ln2_rstd),
                 Nl, e.fp32, e.dev, s.ln_stats);
  e.ready(ctx, {b.ln2.w, b.ln2.b});
  // The attention branch.
  const A* dattn = s.keep(a.d_proj, b.proj.whole_dy(e.split, s.through_dropout(k, dres, kAttnResid), N), N * C);
  b.proj.backward(k, e.split, dbig1, dattn, e.acts.act<A>(a.atty), P, G, N);
  linear_ready(b.proj.w, b.proj.b);
  A* dqkv = split ? e.acts.act<A>(a.d_qkv) : dbig2;
  b.attn.backward(k, dqkv, dbig1, e.acts.act<A>(a.qkv), e.acts.act<A>(a.atty),
                  a.att_h >= 0 ? e.acts.act<A>(a.att_h) : nullptr, e.acts.stat(a.lse), f, s.stream(kAttnProbs),
                  e.acts.ws(), e.acts.scr<A>(e.acts.plan().s_cp));
  if (sel && redo) b.ln1.forward(k, e.acts.act<A>(a.ln1), e.acts.stat(a.ln1_mean), e.acts.stat(a.ln1_rstd), x, P, Nl);
  b.qkv.backward(k, e.split, dtmp, dqkv, e.acts.act<A>(a.ln1), P, G, N);
  linear_ready(b.qkv.w, b.qkv.b);
  b.ln1.backward(k, e.split, dres, dtmp, x, P, G, e.acts.stat(a.ln1_mean), e.acts.stat(a.ln1_rstd), Nl, e.fp32, e.dev,
                 s.ln_stats);
  e.ready(ctx, {b.ln1.w, b.ln1.b});
}

template <class A>
void Gpt2Block::weight_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const ParamView<A>& P,
                                const GradView& G, const PassShape& f) const {
  const auto& a = e.acts.layer(l);
  const Layers& b = layers_;
  const int64_t N = f.N;
  b.fcproj.weight_backward(k, e.split, e.acts.act<A>(a.d_fcproj), e.acts.act<A>(a.fch_gelu), P, G, N);
  b.fc.weight_backward(k, e.split, e.acts.act<A>(a.d_fc), e.acts.act<A>(a.ln2), P, G, N);
  b.proj.weight_backward(k, e.split, e.acts.act<A>(a.d_proj), e.acts.act<A>(a.atty), P, G, N);
  b.qkv.weight_backward(k, e.split, e.acts.act<A>(a.d_qkv), e.acts.act<A>(a.ln1), P, G, N);
}

#define PARALLM_BLOCK(A)                                                                                        \
  template void Gpt2Block::forward<A>(const kernels::ModelOps<A>&, const BlockEnv&, int64_t, const A*,          \
                                      const ParamView<A>&, const PassShape&) const;                             \
  template void Gpt2Block::backward<A>(const kernels::ModelOps<A>&, const BlockEnv&, int64_t, const A*,         \
                                       const ParamView<A>&, const GradView&, const PassShape&, bool, A*) const; \
  template void Gpt2Block::weight_backward<A>(const kernels::ModelOps<A>&, const BlockEnv&, int64_t,            \
                                              const ParamView<A>&, const GradView&, const PassShape&) const;
PARALLM_BLOCK(float)
PARALLM_BLOCK(bfloat16)
#undef PARALLM_BLOCK

}  // namespace parallm::model
