#include "model/gpt.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/classifier.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace parallm::model {

namespace {
ShardSpec shard_spec(const TensorGroup* tp) {
  return tp ? ShardSpec{tp->size(), tp->rank()} : ShardSpec{};
}
}  // namespace

GPT::GPT(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev, GPTStorage storage, TensorGroup* tp,
         bool sequence_parallel, PipelinePart pipe, ContextPart cp)
    : cfg_(cfg),
      layout_((cfg.validate(), cfg), shard_spec(tp), pipe.stage),
      max_B_(max_batch),
      max_T_(max_seq),
      dev_(dev),
      compute_(storage.compute),
      k_(&kernels::ops_for(dev)),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      sp_(sequence_parallel && tp_),
      cpl_(cp.layout()) {
  if (cpl_.size > 1) {
    PARALLM_CHECK(!sp_, ConfigError, "config",
                  "parallel.sequence_parallel=true with parallel.cp={}: both split the sequence; use one of them",
                  cpl_.size);
    cpa_ = std::make_unique<CpAttention>(*cp.group, cp, cfg.n_head);
  }
  PARALLM_CHECK(!sp_ || (max_batch * max_seq) % tp_->size() == 0, ConfigError, "model",
                "sequence parallelism splits the {} x {} tokens of a batch over {} ranks: they do not divide",
                max_batch, max_seq, tp_->size());
  PARALLM_CHECK(max_batch > 0, ConfigError, "model", "batch size must be positive, got {}", max_batch);
  PARALLM_CHECK(max_seq > 0 && max_seq * cpl_.size <= cfg.block_size, ConfigError, "model",
                "sequence length {} must be in [1, model.block_size={}]", max_seq * cpl_.size, cfg.block_size);
  PARALLM_CHECK(compute_ == DType::F32 || compute_ == DType::BF16, ConfigError, "model",
                "compute dtype {} is not supported (fp32 or bf16)", dtype_name(compute_));
  if (compute_ == DType::BF16 && dev.is_cpu()) {
    // bf16 mixed precision on the CPU: fp32 activations and buffers, bf16
    // products in the linear layers and the classifier.
    k_ = &kernels::cpu_bf16_product_ops();  // ConfigError without bf16 hardware
    compute_ = DType::F32;
    bf16_products_ = true;
  }
  const bool lowp = compute_ == DType::BF16;
  if (lowp) {
    kb_ = &kernels::bf16_ops_for(dev);
    PARALLM_CHECK(storage.params && storage.grads, ConfigError, "model",
                  "bf16 mixed precision keeps whole parameter and gradient buffers (not with ZeRO stage 2 or 3 yet)");
  }
  if (!dev.is_cpu()) gpu::set_device(dev.index);
  if (storage.params) params_ = DeviceArray<float>(layout_.total(), MemCategory::Params, dev);
  if (storage.grads) grads_ = DeviceArray<float>(layout_.total(), MemCategory::Grads, dev);
  // bf16 copy of the parameters: GPU bf16 compute reads it; CPU bf16 products
  // take their weight operands from it instead of rounding them per product.
  if (lowp || (bf16_products_ && storage.params))
    params_lp_ = DeviceArray<bfloat16>(layout_.total(), MemCategory::Params, dev);

  PARALLM_CHECK(pipe.in_flight.empty() || pipe.in_flight.size() == layout_.chunks().size(), InternalError, "model",
                "{} in-flight counts for {} chunks", pipe.in_flight.size(), layout_.chunks().size());
  PARALLM_CHECK(!pipe.split_backward || cfg.recompute == Recompute::None, ConfigError, "config",
                "model.recompute={} with a split backward (parallel.pp_schedule=zb-h1): the weight half would need the "
                "recomputed buffers again; use model.recompute=none",
                recompute_name(cfg.recompute));
  PARALLM_CHECK(!pipe.split_backward || pipe.pipelined(), InternalError, "model",
                "a split backward keeps its messages in a pipeline stage's buffers");
  pipe_ = std::move(pipe);
  off_ = carve(cfg, max_B_, max_T_, dev, omp_get_max_threads(), compute_, layout_.spec().tp, sp_, pipe_, cpl_);
  int max_sets = 1;
  for (const auto& ch : off_.chunks) {
    sets_.emplace_back(static_cast<size_t>(ch.sets));
    max_sets = std::max(max_sets, ch.sets);
  }
  const int64_t N = max_B_ * max_T_;
  if (lowp) {
    acts_lp_ = DeviceArray<bfloat16>(off_.acts, MemCategory::Activations, dev);
    scratch_lp_ = DeviceArray<bfloat16>(off_.scratch, MemCategory::Scratch, dev);
  } else {
    acts_ = DeviceArray<float>(off_.acts, MemCategory::Activations, dev);
    scratch_ = DeviceArray<float>(off_.scratch, MemCategory::Scratch, dev);
  }
  stats_ = DeviceArray<float>(off_.stats, MemCategory::Activations, dev);
  ws_ = DeviceArray<float>(off_.ws, MemCategory::Scratch, dev);
  if (!dev.is_cpu()) {
    tokens_d_ = DeviceArray<int32_t>(N * max_sets, MemCategory::Activations, dev);  // a copy per activation set
    targets_d_ = DeviceArray<int32_t>(N * max_sets, MemCategory::Activations, dev);
    staging_ = gpu::PinnedBuffer(static_cast<size_t>(3 * N) * 4, MemCategory::Other);
    uploaded_ = std::make_unique<gpu::Event>();
    losses_copied_ = std::make_unique<gpu::Event>();
  }
}

int64_t GPT::num_params_nanogpt() const {
  // The whole model's (every stage's), wpe excluded, as nanoGPT prints it.
  return static_cast<int64_t>(cfg_.num_params()) - cfg_.block_size * cfg_.n_embd;
}

void GPT::set_store(ParamStore* store) {
  PARALLM_CHECK(!store || compute_ == DType::F32, ConfigError, "gpt",
                "bf16 compute reads its own bf16 copy of whole parameters; a sharded store needs fp32 compute");
  store_ = store;
}

const float* GPT::group_params(int g, Pass pass) const {
  if (store_) return store_->params(g, pass);
  PARALLM_CHECK(params_.data(), InternalError, "gpt", "the model holds no parameters and has no store");
  return params_.data() + layout_.group(g).begin;
}
void GPT::release_group(int g, Pass pass) const {
  if (store_) store_->release_params(g, pass);
}
float* GPT::group_grads(int g) const {
  if (store_) return store_->grads(g);
  PARALLM_CHECK(grads_.data(), InternalError, "gpt", "the model holds no gradients and has no store");
  return grads_.data() + layout_.group(g).begin;
}
void GPT::group_grads_done(int g) const {
  if (store_) store_->grads_done(g);
}

template <class A>
const A* GPT::params_of(int g, Pass pass) {
  if constexpr (std::is_same_v<A, float>) {
    return group_params(g, pass);
  } else {
    if (lp_stale_) {
      PARALLM_CHECK(params_.data(), InternalError, "gpt", "bf16 compute weights need the fp32 parameters");
      kernels::convert_to_bf16(dev_, params_lp_.data(), params_.data(), layout_.total());
      lp_stale_ = false;
    }
    return params_lp_.data() + layout_.group(g).begin;
  }
}

Tensor GPT::param(const std::string& name) const {
  PARALLM_CHECK(params_.data(), InternalError, "gpt.param", "the parameters live in a store (sharded)");
  const auto& s = layout_.find(name);
  return Tensor::view_of(params_.data() + s.offset, s.shape, DType::F32, dev_);
}
Tensor GPT::grad(const std::string& name) const {
  PARALLM_CHECK(grads_.data(), InternalError, "gpt.grad", "the gradients live in a store (sharded)");
  const auto& s = layout_.find(name);
  return Tensor::view_of(grads_.data() + s.offset, s.shape, DType::F32, dev_);
}

void GPT::init_weights(uint64_t seed) {
  PARALLM_CHECK(params_.data(), InternalError, "gpt.init_weights", "the parameters live in a store (sharded)");
  params_changed();
  if (dev_.is_cpu()) {
    layout_.init(params_.data(), seed);
    return;
  }
  std::vector<float> host(params_.size());
  layout_.init(host.data(), seed);
  load_params(host.data());
}

void GPT::zero_grad() {
  PARALLM_PROFILE("zero_grad");
  if (grads_.data()) grads_.zero();
}

double GPT::flops_per_token(int64_t T) const {
  const double N = static_cast<double>(num_params_nanogpt());
  return 6.0 * N + 12.0 * cfg_.n_layer * cfg_.n_embd * static_cast<double>(T);
}

std::optional<kernels::Bf16CopyScope> GPT::weight_copy_scope() {
  if (!bf16_products_ || !params_lp_.data()) return std::nullopt;
  if (lp_stale_) {
    PARALLM_PROFILE("to_bf16");
    kernels::convert_to_bf16(dev_, params_lp_.data(), params_.data(), layout_.total());
    lp_stale_ = false;
  }
  return std::optional<kernels::Bf16CopyScope>(std::in_place, params_.data(), params_lp_.data(), layout_.total());
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, const StepContext& ctx) {
  PARALLM_CHECK(num_chunks() == 1 && layout_.first_stage() && layout_.last_stage(), InternalError, "gpt.forward",
                "a pipeline stage runs forward_chunk");
  return forward_chunk(0, 0, tokens, targets, B, T, ctx);
}

float GPT::forward_chunk(int chunk, int set, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                         const StepContext& ctx) {
  PARALLM_CHECK(!ctx.need_grad || targets || !last_chunk(chunk), ShapeError, "gpt.forward", "gradients need targets");
  begin_pass(chunk, set, tokens, targets, B, T, "gpt.forward");
  const auto copy = weight_copy_scope();
  float loss = compute_ == DType::BF16 ? forward_impl(*kb_, chunk, tokens, targets, B, T, ctx)
                                       : forward_impl<float>(*k_, chunk, tokens, targets, B, T, ctx);
  SetState& st = cur_set();
  st.B = B;
  st.T = T;
  st.grads_ready = ctx.need_grad && (targets || !last_chunk(chunk));
  st.weights_pending = false;
  if (last_chunk(chunk)) {
    cur_B_ = B;
    cur_T_ = T;
    logits_set_ = set;
  }
  last_fwd_chunk_ = chunk;
  last_fwd_set_ = set;
  return loss;
}

void GPT::select(int chunk, int set) {
  PARALLM_CHECK(chunk >= 0 && chunk < num_chunks() && set >= 0 && set < off_.chunks[chunk].sets, InternalError, "gpt",
                "chunk {} set {} outside this stage's {} chunks (set counts)", chunk, set, num_chunks());
  chunk_ = chunk;
  set_ = set;
  shift_a_ = set * co().acts_stride;
  shift_s_ = set * co().stats_stride;
}

void GPT::begin_pass(int chunk, int set, const int32_t*& tokens, const int32_t*& targets, int64_t B, int64_t T,
                     const char* where) {
  select(chunk, set);
  PARALLM_CHECK(B > 0 && B <= max_B_ && T > 0 && T <= max_T_, ShapeError, where,
                "batch {}x{} exceeds the model's allocated {}x{}", B, T, max_B_, max_T_);
  const int64_t N = B * T, V = cfg_.vocab_size;
  PARALLM_CHECK(N % token_multiple() == 0, ShapeError, where,
                "sequence parallelism splits the batch's {} x {} tokens over {} ranks: they do not divide", B, T,
                token_multiple());
  if (!first_chunk(chunk)) tokens = nullptr;  // only the embedding reads them
  if (!last_chunk(chunk)) targets = nullptr;  // only the loss
  if (tokens)
    for (int64_t i = 0; i < N; ++i)
      PARALLM_CHECK(tokens[i] >= 0 && tokens[i] < V, ShapeError, where,
                    "token {} at position {} is outside the vocabulary [0, {})", tokens[i], i, V);
  if (targets)
    for (int64_t i = 0; i < N; ++i)
      PARALLM_CHECK(targets[i] >= 0 && targets[i] < V, ShapeError, where,
                    "target {} at position {} is outside the vocabulary [0, {})", targets[i], i, V);
  if (dev_.is_cpu() || (!tokens && !targets)) return;
  PARALLM_CHECK(pending_losses_ == 0, InternalError, where,
                "the previous forward's deferred loss was not read (deferred_loss())");
  // Through page-locked staging: the copies queue behind the GPU's work
  // instead of waiting for it to drain. The staging is reused only once the
  // previous upload has left it. Each activation set has its own copies
  // (backward's embedding reads them again).
  uploaded_->wait();
  auto* stage = staging_.as<int32_t>();
  const int64_t at = set * max_B_ * max_T_;
  if (tokens) {
    std::copy(tokens, tokens + N, stage);
    gpu::memcpy_h2d_async(tokens_d_.data() + at, stage, N * sizeof(int32_t));
    tokens = tokens_d_.data() + at;
  }
  if (targets) {
    std::copy(targets, targets + N, stage + max_B_ * max_T_);
    gpu::memcpy_h2d_async(targets_d_.data() + at, stage + max_B_ * max_T_, N * sizeof(int32_t));
    targets = targets_d_.data() + at;
  }
  uploaded_->record();
}

template <class A>
float GPT::forward_impl(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const int32_t* targets,
                        int64_t B, int64_t T, const StepContext& ctx) {
  const int64_t N = B * T, C = cfg_.n_embd, V = cfg_.vocab_size;
  const bool first = first_chunk(chunk), last = last_chunk(chunk);
  // The embeddings (group 0) serve the first chunk's embedding and the last one's tied head.
  const int eg = layout_.embed_group();
  const A* PE = first || last ? params_of<A>(eg, Pass::Forward) : nullptr;
  const int64_t e0 = first || last ? layout_.group(eg).begin : 0;
  const A* P = nullptr;
  int64_t p0 = 0;
  auto W = [&](int64_t o) -> const A* { return o < 0 ? nullptr : P + (o - p0); };
  const Fwd f = pass_shape(ctx, B, T);
  const int64_t Nl = f.Nl;
  float* ws = ws_.data();
  A* x = act<A>(co().input);
  if (first) embed(k, x, tokens, PE, e0, f);
  if (first && ctx.watch) watch_embed(*ctx.watch, x, PE, e0, f);
  const LayerRange r = layout_.chunks()[static_cast<size_t>(chunk)];
  for (int64_t l = r.begin; l < r.end; ++l) {
    const int g = layout_.group_of_block(l);
    P = params_of<A>(g, Pass::Forward);
    p0 = layout_.group(g).begin;
    block_forward(k, l, x, P, p0, f);
    if (ctx.watch) watch_block(*ctx.watch, l, P, p0, f);
    x = act<A>(off_.la[l].res3);
    if (!(last && l + 1 == r.end)) release_group(g, Pass::Forward);  // the last group also holds ln_f
  }
  if (!last) {
    if (first) release_group(eg, Pass::Forward);
    return 0.0f;
  }
  k.layernorm_forward(act<A>(co().lnf), stat(co().lnf_mean), stat(co().lnf_rstd), x, W(layout_.lnf_w()),
                      W(layout_.lnf_b()), Nl, C);
  if (ctx.watch) watch_head(*ctx.watch, P, p0, false, f);
  release_group(layout_.num_groups() - 1, Pass::Forward);
  if (!targets) {
    release_group(eg, Pass::Forward);
    return 0.0f;
  }
  float* losses = stat(co().losses);
  // The tied head adds its wte gradient here; backward adds the embedding's.
  float* dwte = ctx.need_grad ? group_grads(eg) + (layout_.wte() - e0) : nullptr;
  A* dlnf = ctx.need_grad ? act<A>(co().dlnf) : nullptr;
  if (tp_)
    vocab_parallel_loss(k, losses, dlnf, dwte, whole_rows(act<A>(co().lnf), N), PE + (layout_.wte() - e0), targets, N,
                        ctx.loss_scale / static_cast<float>(N));
  else
    k.classifier_forward_backward(losses, dlnf, dwte, act<A>(co().lnf), PE + (layout_.wte() - e0), targets, N, C, V,
                                  ctx.loss_scale / static_cast<float>(N), ws);
  if (ctx.watch) watch_head(*ctx.watch, P, p0, true, f);
  release_group(eg, Pass::Forward);  // backward does not read the embedding weights
  if (!dev_.is_cpu()) {
    gpu::memcpy_d2h_async(host_losses(), losses, N * sizeof(float));
    losses_copied_->record();
    pending_losses_ = N;
    if (ctx.defer_loss) return std::numeric_limits<float>::quiet_NaN();
    return deferred_loss();
  }
  return mean_of(losses, N);
}

template <class A>
void GPT::embed(const kernels::ModelOps<A>& k, A* x, const int32_t* tokens, const A* PE, int64_t e0, const Fwd& f) {
  const int64_t N = f.N, Nl = f.Nl, C = cfg_.n_embd;
  if (tp_) {  // each rank embeds its vocabulary rows' tokens, rank 0 adds the positions; the sum is exact
    const auto vr = layout_.vocab_rows();
    A* parts = sp_ ? scr<A>(off_.s_gfull) : x;
    const A* wpe = tp_->rank() == 0 ? PE + (layout_.wpe() - e0) : nullptr;
    for_position_runs(f, [&](int64_t row, int64_t pos, int64_t Bn, int64_t Tn) {
      k.vp_embedding_forward(parts + row * C, tokens + row, PE + (layout_.wte() - e0), wpe ? wpe + pos * C : nullptr,
                             Bn, Tn, C, vr.v0, vr.rows);
    });
    if (sp_)
      scatter_forward(tp_, parts, x, Nl * C);
    else
      reduce_forward(tp_, x, N * C);
  } else {
    for_position_runs(f, [&](int64_t row, int64_t pos, int64_t Bn, int64_t Tn) {
      k.embedding_forward(x + row * C, tokens + row, PE + (layout_.wte() - e0), PE + (layout_.wpe() - e0) + pos * C, Bn,
                          Tn, C);
    });
  }
  if (f.p > 0) dropout_rows(k, false, x, x, stream_id(kRngDropout, f.ctx->micro_step, cfg_.n_layer, kEmbed), f);
}

template <class A>
void GPT::dropout_rows(const kernels::ModelOps<A>& k, bool backward, A* out, const A* in, uint64_t stream,
                       const Fwd& f) const {
  const auto fn = backward ? k.dropout_backward : k.dropout_forward;
  const int64_t C = cfg_.n_embd;
  if (!cpa_) return fn(out, in, f.Nl * C, f.p, f.ctx->seed, stream, f.drop_base);
  for (int64_t b = 0; b < f.B; ++b)  // element (sample s, global position t, channel c) has index (s Tg + t) C + c
    for (const CpRun& r : f.runs) {
      const int64_t o = (b * f.T + r.local) * C;
      fn(out + o, in + o, r.len * C, f.p, f.ctx->seed, stream,
         static_cast<uint64_t>(((f.ctx->sample_offset + b) * f.Tg + r.global) * C));
    }
}

void* GPT::chunk_input(int chunk, int set) {
  select(chunk, set);
  return compute_ == DType::BF16 ? static_cast<void*>(act<bfloat16>(co().input)) : act<float>(co().input);
}

void* GPT::chunk_output(int chunk, int set) {
  select(chunk, set);
  const int64_t o = off_.la[static_cast<size_t>(layout_.chunks()[static_cast<size_t>(chunk)].end - 1)].res3;
  return compute_ == DType::BF16 ? static_cast<void*>(act<bfloat16>(o)) : act<float>(o);
}

void* GPT::chunk_grad(int chunk, int set) {
  select(chunk, set);
  PARALLM_CHECK(co().grad >= 0, InternalError, "gpt", "a whole model has no gradient messages");
  return compute_ == DType::BF16 ? static_cast<void*>(act<bfloat16>(co().grad)) : act<float>(co().grad);
}

GPT::Fwd GPT::pass_shape(const StepContext& ctx, int64_t B, int64_t T) const {
  Fwd f;
  f.B = B;
  f.T = T;
  f.N = B * T;
  // The residual stream's rows on this rank: all N, or (sequence parallel) N/tp from row0.
  f.Nl = f.N / token_multiple();
  const int64_t row0 = sp_ ? tp_->rank() * f.Nl : 0;
  f.p = ctx.train ? cfg_.dropout : 0.0f;
  f.drop_base = static_cast<uint64_t>((ctx.sample_offset * T + row0) * cfg_.n_embd);  // global index of element 0
  f.Tg = T * cpl_.size;
  if (cpa_) f.runs = cpl_.runs(f.Tg);
  f.ctx = &ctx;
  return f;
}

template <class A>
void GPT::linear_residual(const kernels::ModelOps<A>& k, A* out, const A* res, const A* inp, const A* w, const A* bias,
                          int64_t IN, int64_t l, uint64_t site, const Fwd& f) {
  // out = res + drop(linear(inp)): one GEMM where the kernels offer the fused
  // form and no dropout sits between; else the GEMM into tmp, dropout, the add.
  // Tensor parallel, the linear is row-parallel: the partial products are
  // reduced over the group (sequence parallel: reduce-scattered to this
  // rank's rows), then the (whole) bias is added once.
  const int64_t N = f.N, Nl = f.Nl, C = cfg_.n_embd;
  A* tmp = scr<A>(off_.s_tmp);
  if (tp_) {
    A* partial = sp_ ? scr<A>(off_.s_gfull) : tmp;
    k.matmul_forward(partial, inp, w, nullptr, N, IN, C);
    if (sp_)
      scatter_forward(tp_, partial, tmp, Nl * C);
    else
      reduce_forward(tp_, tmp, N * C);
    if (bias) k.bias_forward(tmp, bias, Nl, C);
  } else if (f.p <= 0 && k.matmul_forward_residual) {
    k.matmul_forward_residual(out, inp, w, bias, res, N, IN, C);
    return;
  } else {
    k.matmul_forward(tmp, inp, w, bias, N, IN, C);
  }
  if (f.p > 0) dropout_rows(k, false, tmp, tmp, stream_id(kRngDropout, f.ctx->micro_step, l, site), f);
  k.residual_forward(out, res, tmp, Nl * C);
}

template <class A>
void GPT::block_forward(const kernels::ModelOps<A>& k, int64_t l, const A* x, const A* P, int64_t p0, const Fwd& f) {
  // res2 = x + drop(proj(attn(qkv(ln1(x))))); res3 = res2 + drop(fcproj(gelu(fc(ln2(res2))))).
  // W(o): the parameter at flat offset o, in the block's group (at P, from flat offset p0).
  auto W = [&](int64_t o) -> const A* { return o < 0 ? nullptr : P + (o - p0); };
  const auto& a = off_.la[l];
  const auto& bp = layout_.block(l);
  const int64_t N = f.N, Nl = f.Nl, C = cfg_.n_embd, tp = layout_.spec().tp, Cl = C / tp;
  k.layernorm_forward(act<A>(a.ln1), stat(a.ln1_mean), stat(a.ln1_rstd), x, W(bp.ln1_w), W(bp.ln1_b), Nl, C);
  k.matmul_forward(act<A>(a.qkv), whole_rows(act<A>(a.ln1), N), W(bp.qkv_w), W(bp.qkv_b), N, C, 3 * Cl);
  const kernels::AttnDropout ad = attn_dropout(*f.ctx, l, f.p);
  if (cpa_)
    cpa_->forward(k, act<A>(a.atty), stat(a.lse), act<A>(a.qkv), a.att_h >= 0 ? act<A>(a.att_h) : nullptr, f.B, f.T, Cl,
                  cfg_.n_head / tp, ad, ws_.data(), scr<A>(off_.s_cp));
  else
    k.attention_forward(act<A>(a.atty), stat(a.lse), act<A>(a.qkv), f.B, f.T, Cl, cfg_.n_head / tp, ad, ws_.data());
  linear_residual(k, act<A>(a.res2), x, act<A>(a.atty), W(bp.proj_w), W(bp.proj_b), Cl, l, kAttnResid, f);
  k.layernorm_forward(act<A>(a.ln2), stat(a.ln2_mean), stat(a.ln2_rstd), act<A>(a.res2), W(bp.ln2_w), W(bp.ln2_b), Nl,
                      C);
  k.matmul_forward(act<A>(a.fch), whole_rows(act<A>(a.ln2), N), W(bp.fc_w), W(bp.fc_b), N, C, 4 * Cl);
  k.gelu_forward(act<A>(a.fch_gelu), act<A>(a.fch), N * 4 * Cl, cfg_.gelu);
  linear_residual(k, act<A>(a.res3), act<A>(a.res2), act<A>(a.fch_gelu), W(bp.fcproj_w), W(bp.fcproj_b), 4 * Cl, l,
                  kMlpResid, f);
}

void GPT::zero_device(void* p, size_t bytes) const {
  if (dev_.is_cpu())
    std::memset(p, 0, bytes);
  else
    gpu::memset_zero(p, bytes);
}

template <class A>
const A* GPT::whole_rows(const A* local, int64_t N) {
  if (!sp_) return local;
  A* whole = scr<A>(off_.s_full);
  gather_forward(tp_, local, whole, N / tp_->size() * cfg_.n_embd);
  return whole;
}

kernels::AttnDropout GPT::attn_dropout(const StepContext& ctx, int64_t l, float p) const {
  // Indexed by global sample and head: any data or tensor split draws the one-rank masks.
  const int64_t NH = cfg_.n_head, NHl = NH / layout_.spec().tp;
  return {p, ctx.seed, stream_id(kRngDropout, ctx.micro_step, l, kAttnProbs),
          ctx.sample_offset * NH + layout_.spec().rank * NHl, tp_ ? NH : 0};
}

template <class A>
void GPT::vocab_parallel_loss(const kernels::ModelOps<A>& k, float* losses, A* dlnf, float* dwte, const A* lnf,
                              const A* wte, const int32_t* targets, int64_t N, float dloss) {
  // Megatron's vocabulary-parallel cross-entropy: the logits of this rank's
  // rows, then the row maxima and the sums of exponentials (and the target's
  // logit) combined over the group, N and 2N floats, never V.
  const auto vr = layout_.vocab_rows();
  const int64_t C = cfg_.n_embd;
  float* logits = stat(off_.logits);
  float* mx = stat(off_.xmax);
  float* sums = stat(off_.xsums);
  k.classifier_logits(logits, lnf, wte, N, C, vr.rows);
  k.xent_vp_local_max(mx, logits, N, vr.rows, vr.valid);
  tp_->max(mx, N);
  k.xent_vp_exp_sums(sums, logits, mx, targets, N, vr.rows, vr.valid, vr.v0);
  tp_->sum(sums, 2 * N);
  k.xent_vp_losses(losses, mx, sums, N);
  if (!dlnf) return;
  A* dlogits;
  if constexpr (std::is_same_v<A, float>)
    dlogits = logits;  // in place
  else
    dlogits = act<A>(off_.dlogits);
  k.xent_vp_grad(dlogits, logits, mx, sums, targets, N, vr.rows, vr.valid, vr.v0, dloss);
  if (sp_) {  // the head's input was gathered from the rows: its gradient goes back to them
    A* partial = scr<A>(off_.s_gfull);
    k.matmul_backward(partial, dwte, nullptr, dlogits, lnf, wte, N, C, vr.rows);
    gather_backward(tp_, partial, dlnf, N / tp_->size() * C);
    return;
  }
  k.matmul_backward(dlnf, dwte, nullptr, dlogits, lnf, wte, N, C, vr.rows);
  copy_backward(tp_, dlnf, N * C);  // the head's input is ln_f's output, whole on every rank
}

float* GPT::host_losses() const {
  return staging_.as<float>() + 2 * max_B_ * max_T_;
}

float GPT::mean_of(const float* losses, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += losses[i];
  return static_cast<float>(sum / static_cast<double>(n));
}

float GPT::deferred_loss() {
  PARALLM_CHECK(pending_losses_ > 0, InternalError, "gpt.deferred_loss", "no forward with a deferred loss on the GPU");
  losses_copied_->wait();
  const int64_t n = std::exchange(pending_losses_, 0);
  return mean_of(host_losses(), n);
}

void GPT::last_logits(float* out, int64_t B, int64_t T, int64_t pos) {
  if (pos < 0) pos = T - 1;
  PARALLM_CHECK(pos < T, ShapeError, "gpt.last_logits", "position {} is past the sequence's {} tokens", pos, T);
  const auto copy = weight_copy_scope();
  if (compute_ == DType::BF16)
    logits_impl(*kb_, out, B, T, pos);
  else
    logits_impl<float>(*k_, out, B, T, pos);
}

void GPT::all_logits(float* out, int64_t B, int64_t T) {
  const auto copy = weight_copy_scope();
  if (compute_ == DType::BF16)
    logits_impl(*kb_, out, B, T, -1);
  else
    logits_impl<float>(*k_, out, B, T, -1);
}

template <class A>
void GPT::logits_impl(const kernels::ModelOps<A>& k, float* out, int64_t B, int64_t T, int64_t pos) {
  const bool last_only = pos >= 0;
  PARALLM_CHECK(layout_.last_stage() && B == cur_B_ && T == cur_T_, InternalError,
                last_only ? "gpt.last_logits" : "gpt.all_logits",
                "call on the last stage after forward on the same batch");
  select(num_chunks() - 1, logits_set_);  // where the last stage's last forward left ln_f's output
  // Tensor parallel, each rank computes its vocabulary rows' logits and the
  // group gathers them ([rank][row][column]), real columns only into `out`.
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size, rows = last_only ? B : B * T;
  const int64_t Vr = tp_ ? layout_.vocab_rows().rows : V, parts = tp_ ? tp_->size() : 1;
  DeviceArray<float> mine, all;
  float* o = out;
  if (!dev_.is_cpu() || tp_) {
    mine = DeviceArray<float>(rows * Vr, MemCategory::Scratch, dev_);
    o = mine.data();
  }
  const A* wte = params_of<A>(0, Pass::Forward) + (layout_.wte() - layout_.group(0).begin);
  const A* lnf = whole_rows(act<A>(co().lnf), B * T);  // sequence parallel: every rank's rows
  if (last_only)
    for (int64_t b = 0; b < B; ++b) k.classifier_logits(o + b * Vr, lnf + (b * T + pos) * C, wte, 1, C, Vr);
  else
    k.classifier_logits(o, lnf, wte, rows, C, Vr);
  release_group(0, Pass::Forward);
  if (!tp_) {
    if (!dev_.is_cpu()) mine.copy_to_host(out, rows * V);
    return;
  }
  all = DeviceArray<float>(parts * rows * Vr, MemCategory::Scratch, dev_);
  tp_->gather(mine.data(), all.data(), rows * Vr);
  std::vector<float> host(static_cast<size_t>(parts * rows * Vr));
  all.copy_to_host(host.data(), host.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < V; ++v) out[r * V + v] = host[((v / Vr) * rows + r) * Vr + v % Vr];
}

template void GPT::block_forward<float>(const kernels::ModelOps<float>&, int64_t, const float*, const float*, int64_t,
                                        const Fwd&);
template void GPT::block_forward<bfloat16>(const kernels::ModelOps<bfloat16>&, int64_t, const bfloat16*,
                                           const bfloat16*, int64_t, const Fwd&);
template void GPT::dropout_rows<float>(const kernels::ModelOps<float>&, bool, float*, const float*, uint64_t,
                                       const Fwd&) const;
template void GPT::dropout_rows<bfloat16>(const kernels::ModelOps<bfloat16>&, bool, bfloat16*, const bfloat16*,
                                          uint64_t, const Fwd&) const;
template const float* GPT::whole_rows<float>(const float*, int64_t);
template const bfloat16* GPT::whole_rows<bfloat16>(const bfloat16*, int64_t);
template const float* GPT::params_of<float>(int, Pass);
template const bfloat16* GPT::params_of<bfloat16>(int, Pass);

}  // namespace parallm::model
