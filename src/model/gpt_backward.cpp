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
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/numeric_watch.h"

namespace parallm::model {

namespace {
void zero_on(Device dev, void* p, size_t bytes) {
  if (dev.is_cpu())
    std::memset(p, 0, bytes);
  else
    gpu::memset_zero(p, bytes);
}
}  // namespace

void GPT::backward(const int32_t* tokens, int64_t B, int64_t T, const StepContext& ctx) {
  PARALLM_CHECK(num_chunks() == 1 && layout_.first_stage() && layout_.last_stage(), InternalError, "gpt.backward",
                "a pipeline stage runs backward_chunk");
  backward_chunk(0, 0, tokens, B, T, ctx, BackwardPart::All);
}

void GPT::backward_chunk(int chunk, int set, const int32_t* tokens, int64_t B, int64_t T, const StepContext& ctx,
                         BackwardPart part) {
  acts_.select(chunk, set);
  Activations::SetState& st = acts_.state();
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
  if (tokens && !dev_.is_cpu()) tokens = io_.device_tokens(set);  // uploaded by forward
  const auto copy = pa_.copy_scope(bf16_products());
  const PassShape f = pass_shape(ctx, B, T);
  if (weight) {
    if (compute_ == DType::BF16)
      weight_backward(*kb_, chunk, tokens, f);
    else
      weight_backward<float>(*k_, chunk, tokens, f);
    return;
  }
  // The shared recompute buffers still hold the last forward's last block when
  // that forward was this chunk's on this set: that block is not redone.
  const bool fresh = last_fwd_chunk_ == chunk && last_fwd_set_ == acts_.set();
  last_fwd_chunk_ = -1;
  const auto queue = [&] {
    if (compute_ == DType::BF16)
      backward_impl(*kb_, chunk, tokens, f, part, fresh);
    else
      backward_impl<float>(*k_, chunk, tokens, f, part, fresh);
  };
  PassGraphs* g = part == BackwardPart::All ? graphs_for(ctx) : nullptr;
  if (g)
    g->run({1, chunk, set, B, T, ctx.loss_scale, fresh ? 1 : 0}, queue);
  else
    queue();
}

template <class A>
void GPT::backward_impl(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const PassShape& f,
                        BackwardPart part, bool fresh) {
  const StepContext& ctx = *f.ctx;
  const bool split = part == BackwardPart::Input;
  const LayerRange r = layout_.chunks()[static_cast<size_t>(chunk)];
  // d(residual stream): the set's gradient message on a pipeline stage (it
  // arrives there and leaves from there), else scratch.
  A* dres = acts_.chunk_acts().grad >= 0 ? acts_.act<A>(acts_.chunk_acts().grad) : acts_.scr<A>(acts_.plan().s_dres);
  // Group by group, from the last block down (the input half leaves the
  // linear layers' weight gradients to the weight half); the last block's
  // group also holds ln_f and is entered once.
  ParamView<A> P;
  GradView G;
  int cur = -1;
  auto enter = [&](int g) {
    if (g == cur) return;
    P = {pa_.params<A>(g, Pass::Backward), layout_.group(g).begin};
    G = {pa_.grads(g), layout_.group(g).begin, !split};
    cur = g;
  };
  if (last_chunk(chunk)) {  // d(residual stream) from the final LayerNorm
    enter(layout_.num_groups() - 1);
    zero_on(dev_, dres, sizeof(A) * f.Nl * cfg_.n_embd);
    spec_.lnf.backward(k, spec_.split, dres, acts_.act<A>(acts_.chunk_acts().dlnf),
                       acts_.act<A>(acts_.layer(r.end - 1).res3), P, G, acts_.stat(acts_.chunk_acts().lnf_mean),
                       acts_.stat(acts_.chunk_acts().lnf_rstd), f.Nl, *k_, dev_, acts_.stat(acts_.plan().ln_grad));
    if (ctx.watch) watch().grads(*ctx.watch, cfg_.n_layer, G.base, G.begin, dres, part, f);
    block_env().ready(ctx,
                      {layout_.lnf_w(), layout_.lnf_b(), layout_.lm_head()});  // an untied head's, final since forward
  }  // else dres holds the received d(chunk output)
  for (int64_t l = r.end - 1; l >= r.begin; --l) {
    const int g = layout_.group_of_block(l);
    enter(g);
    const A* x_in = l == r.begin ? acts_.act<A>(acts_.chunk_acts().input) : acts_.act<A>(acts_.layer(l - 1).res3);
    const kernels::Fp8Scope fp8(fp8_block(products_, l, cfg_.n_layer));
    spec_.blocks[static_cast<size_t>(l)].backward(k, block_env(), l, x_in, P, G, f, !(fresh && l + 1 == r.end), dres);
    if (ctx.watch) watch().grads(*ctx.watch, l, G.base, G.begin, dres, part, f);
    if (!split) pa_.grads_done(g);
    pa_.release(g, Pass::Backward);
  }
  // dres now holds d(chunk input): the message to the previous stage, or on
  // the first chunk d(embedding output), which W takes from there in a split backward.
  if (!first_chunk(chunk) || split) return;
  embedding_backward(k, dres, tokens, f);
  block_env().ready(ctx, {layout_.wpe(), layout_.wte()});
  pa_.grads_done(0);
}

template <class A>
void GPT::weight_backward(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const PassShape& f) {
  const LayerRange r = layout_.chunks()[static_cast<size_t>(chunk)];
  for (int64_t l = r.end - 1; l >= r.begin; --l) {
    const int g = layout_.group_of_block(l);
    const ParamView<A> P{pa_.params<A>(g, Pass::Backward), layout_.group(g).begin};
    const GradView G{pa_.grads(g), layout_.group(g).begin};
    const Block& b = spec_.blocks[static_cast<size_t>(l)];
    const kernels::Fp8Scope fp8(fp8_block(products_, l, cfg_.n_layer));
    b.weight_backward(k, block_env(), l, P, G, f);
    if (f.ctx->watch) watch().grads<A>(*f.ctx->watch, l, G.base, G.begin, nullptr, BackwardPart::Weight, f);
    b.report_linear(block_env(), *f.ctx);
    pa_.grads_done(g);
    pa_.release(g, Pass::Backward);
  }
  if (!first_chunk(chunk)) return;
  embedding_backward(k, acts_.act<A>(acts_.chunk_acts().grad), tokens, f);
  block_env().ready(*f.ctx, {layout_.wpe(), layout_.wte()});
  pa_.grads_done(0);
}

template <class A>
void GPT::embedding_backward(const kernels::ModelOps<A>& k, const A* demb, const int32_t* tokens, const PassShape& f) {
  const StepContext& ctx = *f.ctx;
  if (f.p > 0) {
    A* dtmp = acts_.scr<A>(acts_.plan().s_tmp);
    f.dropout_rows(k, true, dtmp, demb, stream_id(kRngDropout, ctx.micro_step, cfg_.n_layer, kEmbed));
    demb = dtmp;
  }
  const GradView GE{pa_.grads(0), layout_.group(0).begin};
  spec_.embed.backward(k, spec_.split, demb, tokens, GE, f);
  if (ctx.watch) watch().embed_grads(*ctx.watch, GE.base, GE.begin, f);
}

}  // namespace parallm::model
