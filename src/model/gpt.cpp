#include "model/gpt.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/gpu.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/classifier.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fp8.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/vocab_layers.h"

namespace parallm::model {

namespace {
ShardSpec shard_spec(const TensorGroup* tp, const ExpertPart& experts) {
  ShardSpec s = tp ? ShardSpec{tp->size(), tp->rank()} : ShardSpec{};
  s.ep = experts.ep_size();
  s.ep_rank = experts.ep_rank();
  return s;
}
}  // namespace

GPT::GPT(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev, GPTStorage storage, TensorGroup* tp,
         bool sequence_parallel, PipelinePart pipe, ContextPart cp, ExpertPart experts)
    : cfg_(cfg),
      layout_((cfg.validate(), cfg), shard_spec(tp, experts), pipe.stage),
      max_B_(max_batch),
      max_T_(max_seq),
      dev_(dev),
      compute_(storage.compute),
      k_(&kernels::ops_for(dev)),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      experts_(experts),
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
    products_ = CpuProducts::Bf16;
  }
  // GPU FP8 with bf16 activations: the bf16 table's FP8 linear layers (kb_ below); else fp32 activations.
  const bool fp8_bf16 = storage.fp8_products && compute_ == DType::BF16 && !dev.is_cpu();
  if (storage.f16_products || storage.fp8_products) {
    PARALLM_CHECK(compute_ == DType::F32 || fp8_bf16, ConfigError, "model",
                  "{} products go with fp32 activations (the compute dtype is {})",
                  storage.f16_products ? "fp16" : "FP8", dtype_name(compute_));
    if (!fp8_bf16) k_ = storage.f16_products ? &kernels::f16_product_ops(dev) : &kernels::fp8_product_ops(dev);
    products_ = storage.f16_products    ? CpuProducts::F16
                : storage.fp8_bf16_ends ? CpuProducts::Fp8Ends
                                        : CpuProducts::Fp8;
  }
  const bool lowp = compute_ == DType::BF16;
  if (lowp) kb_ = fp8_bf16 ? &kernels::fp8_bf16_ops_for(dev) : &kernels::bf16_ops_for(dev);
  if (!dev.is_cpu()) gpu::set_device(dev.index);
  // bf16 copy of the parameters: GPU bf16 compute reads it; CPU bf16 products
  // take their weight operands from it instead of rounding them per product.
  pa_ = ParamAccess(layout_, dev, storage, lowp || (bf16_products() && storage.params));

  PARALLM_CHECK(pipe.in_flight.empty() || pipe.in_flight.size() == layout_.chunks().size(), InternalError, "model",
                "{} in-flight counts for {} chunks", pipe.in_flight.size(), layout_.chunks().size());
  PARALLM_CHECK(!pipe.split_backward || cfg.recompute == Recompute::None, ConfigError, "config",
                "model.recompute={} with a split backward (parallel.pp_schedule=zb-h1): the weight half would need the "
                "recomputed buffers again; use model.recompute=none",
                recompute_name(cfg.recompute));
  PARALLM_CHECK(!pipe.split_backward || pipe.pipelined(), InternalError, "model",
                "a split backward keeps its messages in a pipeline stage's buffers");
  pipe_ = std::move(pipe);
  acts_ = Activations(ActivationPlan::carve(cfg, max_B_, max_T_, dev, omp_get_max_threads(), compute_,
                                            layout_.spec().tp, sp_, pipe_, cpl_, layout_.spec().ep),
                      dev, compute_);
  io_ = BatchIo(dev, max_B_ * max_T_, acts_.max_sets());
  build_layers();
}

void GPT::build_layers() {
  const int64_t C = cfg_.n_embd, tp = layout_.spec().tp, NH = cfg_.n_head;
  const BlockWidths w = block_widths(cfg_, static_cast<int>(tp), layout_.spec().rank);
  TensorSplit split(tp_, sp_, C);
  auto scratch_at = [&](int64_t off) -> void* {
    return compute_ == DType::BF16 ? static_cast<void*>(acts_.scr<bfloat16>(off)) : acts_.scr<float>(off);
  };
  split.set_buffers(scratch_at(acts_.plan().s_full), scratch_at(acts_.plan().s_gfull));
  const Attention attn{cpa_.get(), w.attn(), w.heads, NH, w.first_head, tp_ ? NH : 0};
  spec_ = ModelSpec::build(cfg_, layout_, std::move(split), attn, experts_);
  rope_ = RopeTable(cfg_, dev_, max_T_);
}

GPT::Buffers GPT::buffers(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev, int threads,
                          DType compute, int tp, bool sequence_parallel, const PipelinePart& pipe, const CpLayout& cp,
                          int ep) {
  return ActivationPlan::carve(cfg, max_batch, max_seq, dev, threads, compute, tp, sequence_parallel && tp > 1, pipe,
                               cp, ep)
      .sizes;
}

int64_t GPT::num_params_nanogpt() const {
  // The whole model's (every stage's), wpe excluded, as nanoGPT prints it (rotary models have none).
  return static_cast<int64_t>(cfg_.num_params()) - (cfg_.llama() ? 0 : cfg_.block_size * cfg_.n_embd);
}

void GPT::set_store(ParamStore* store) {
  PARALLM_CHECK(!store || compute_ == DType::F32, ConfigError, "gpt",
                "bf16 compute reads its own bf16 copy of whole parameters; a sharded store needs fp32 compute");
  pa_.set_store(store);
}

Tensor GPT::param(const std::string& name) const {
  PARALLM_CHECK(pa_.params(), InternalError, "gpt.param", "the parameters live in a store (sharded)");
  const auto& s = layout_.find(name);
  return Tensor::view_of(pa_.params() + s.offset, s.shape, DType::F32, dev_);
}
Tensor GPT::grad(const std::string& name) const {
  PARALLM_CHECK(pa_.grads(), InternalError, "gpt.grad", "the gradients live in a store (sharded)");
  const auto& s = layout_.find(name);
  return Tensor::view_of(pa_.grads() + s.offset, s.shape, DType::F32, dev_);
}

void GPT::init_weights(uint64_t seed) {
  PARALLM_CHECK(pa_.params(), InternalError, "gpt.init_weights", "the parameters live in a store (sharded)");
  params_changed();
  if (dev_.is_cpu()) {
    layout_.init(pa_.params(), seed);
    return;
  }
  std::vector<float> host(static_cast<size_t>(layout_.total()));
  layout_.init(host.data(), seed);
  load_params(host.data());
}

void GPT::zero_grad() {
  PARALLM_PROFILE("zero_grad");
  pa_.zero_grads();
}

Activations::MoeTally GPT::take_moe_tally() {
  Activations::MoeTally& mine = acts_.moe_tally();
  Activations::MoeTally t = mine;
  mine.aux = mine.z = mine.dropped = 0;
  mine.choices = 0;
  std::fill(mine.tokens.begin(), mine.tokens.end(), 0.0);  // kept: no allocation per step
  if (t.tokens.empty()) t.tokens.assign(static_cast<size_t>(cfg_.n_layer * cfg_.moe.experts), 0.0);
  return t;
}

void GPT::balance_expert_bias() {
  const int64_t E = cfg_.moe.experts;
  const std::vector<double>& tokens = acts_.moe_tally().tokens;
  if (cfg_.moe.bias_rate == 0 || tokens.empty()) return;
  PARALLM_CHECK(pa_.params(), InternalError, "gpt.balance_expert_bias", "the parameters live in a store (sharded)");
  float staged[kMaxExperts];  // a GPU's bias on the host (no allocation per step)
  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    if (!cfg_.moe_layer(l) || !layout_.holds_block(l)) continue;
    const double* n = tokens.data() + l * E;
    const double mean = std::accumulate(n, n + E, 0.0) / static_cast<double>(E);
    float* p = pa_.params() + layout_.block(l).router_bias;
    float* b = dev_.is_cpu() ? p : staged;
    if (b != p) gpu::memcpy_d2h(b, p, E * sizeof(float));
    for (int64_t e = 0; e < E; ++e)  // +rate below the mean load, -rate above it
      b[e] += static_cast<float>(n[e] < mean ? cfg_.moe.bias_rate : n[e] > mean ? -cfg_.moe.bias_rate : 0.0);
    if (b != p) gpu::memcpy_h2d(p, b, E * sizeof(float));
  }
  params_changed();
}

std::vector<int32_t> GPT::expert_choices(int64_t l) {
  if (!cfg_.moe_layer(l) || !layout_.holds_block(l)) return {};
  const LayerRange* chunk = nullptr;
  for (const LayerRange& r : layout_.chunks())
    if (l >= r.begin && l < r.end) chunk = &r;
  acts_.select(static_cast<int>(chunk - layout_.chunks().data()), 0);
  const Activations::SetState& st = acts_.state();
  std::vector<int32_t> ids(static_cast<size_t>(st.B * st.T * cfg_.moe.top_k));
  const float* src = acts_.stat(acts_.layer(l).moe.ids);
  if (dev_.is_cpu())
    std::memcpy(ids.data(), src, ids.size() * sizeof(int32_t));
  else
    gpu::memcpy_d2h(ids.data(), src, ids.size() * sizeof(int32_t));
  return ids;
}

double GPT::flops_per_token(int64_t T) const {
  // The parameters a token uses (an MoE model's active ones), wpe excluded.
  const double N =
      static_cast<double>(num_params_nanogpt()) - static_cast<double>(cfg_.num_params() - cfg_.active_params());
  // The attention scores' and values' products: 12 L A T with A the attention width (n_embd for GPT-2).
  return 6.0 * N + 12.0 * cfg_.n_layer * cfg_.attn_width() * static_cast<double>(T);
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
  const auto copy = pa_.copy_scope(bf16_products());
  const PassShape f = pass_shape(ctx, B, T);
  const auto queue = [&] {
    if (compute_ == DType::BF16)
      forward_impl(*kb_, chunk, tokens, targets, f);
    else
      forward_impl<float>(*k_, chunk, tokens, targets, f);
  };
  if (PassGraphs* g = graphs_for(ctx))
    g->run({0, chunk, set, B, T, ctx.loss_scale, 0}, queue);
  else
    queue();
  const float loss =
      last_chunk(chunk) && targets ? io_.loss(acts_.stat(acts_.chunk_acts().losses), f.N, ctx.defer_loss) : 0.0f;
  Activations::SetState& st = acts_.state();
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

void GPT::begin_pass(int chunk, int set, const int32_t*& tokens, const int32_t*& targets, int64_t B, int64_t T,
                     const char* where) {
  acts_.select(chunk, set);
  PARALLM_CHECK(B > 0 && B <= max_B_ && T > 0 && T <= max_T_, ShapeError, where,
                "batch {}x{} exceeds the model's allocated {}x{}", B, T, max_B_, max_T_);
  const int64_t N = B * T, V = cfg_.vocab_size;
  PARALLM_CHECK(N % token_multiple() == 0, ShapeError, where,
                "sequence parallelism splits the batch's {} x {} tokens over {} ranks: they do not divide", B, T,
                token_multiple());
  if (!first_chunk(chunk)) tokens = nullptr;  // only the embedding reads them
  if (!last_chunk(chunk)) targets = nullptr;  // only the loss
  io_.begin(set, tokens, targets, N, V, where);
}

template <class A>
void GPT::forward_impl(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const int32_t* targets,
                       const PassShape& f) {
  const StepContext& ctx = *f.ctx;
  const bool first = first_chunk(chunk), last = last_chunk(chunk);
  // The embeddings (group 0) serve the first chunk's embedding and the last one's tied head.
  const int eg = layout_.embed_group();
  ParamView<A> PE, P;
  if (eg >= 0) PE = {pa_.params<A>(eg, Pass::Forward), layout_.group(eg).begin};
  A* x = acts_.act<A>(acts_.chunk_acts().input);
  if (first) {
    spec_.embed.forward(k, spec_.split, x, tokens, PE, f);
    if (f.p > 0) f.dropout_rows(k, false, x, x, stream_id(kRngDropout, ctx.micro_step, cfg_.n_layer, kEmbed));
    if (ctx.watch) watch().embed(*ctx.watch, x, PE.base, PE.begin, f);
  }
  const LayerRange r = layout_.chunks()[static_cast<size_t>(chunk)];
  for (int64_t l = r.begin; l < r.end; ++l) {
    const int g = layout_.group_of_block(l);
    P = {pa_.params<A>(g, Pass::Forward), layout_.group(g).begin};
    const kernels::Fp8Scope fp8(fp8_block(products_, l, cfg_.n_layer));
    spec_.blocks[static_cast<size_t>(l)].forward(k, block_env(), l, x, P, f);
    if (ctx.watch) watch().block(*ctx.watch, l, P.base, P.begin, f);
    x = acts_.act<A>(acts_.layer(l).res3);
    if (!(last && l + 1 == r.end)) pa_.release(g, Pass::Forward);  // the last group also holds ln_f
  }
  if (!last) {
    if (first) pa_.release(eg, Pass::Forward);
    return;
  }
  head_forward(k, x, PE, P, targets, f);
}

template <class A>
void GPT::head_forward(const kernels::ModelOps<A>& k, const A* x, const ParamView<A>& PE, const ParamView<A>& P,
                       const int32_t* targets, const PassShape& f) {
  // ln_f is in the last block's group (P); the head's weight is the token
  // table (PE, tied) or lm_head.weight (in P, untied).
  const StepContext& ctx = *f.ctx;
  const int64_t N = f.N;
  const int eg = layout_.embed_group(), lg = layout_.num_groups() - 1;
  const bool tied = layout_.lm_head() < 0;
  spec_.lnf.forward(k, acts_.act<A>(acts_.chunk_acts().lnf), acts_.stat(acts_.chunk_acts().lnf_mean),
                    acts_.stat(acts_.chunk_acts().lnf_rstd), x, P, f.Nl);
  if (ctx.watch) watch().head(*ctx.watch, P.base, P.begin, false, f);
  if (tied) pa_.release(lg, Pass::Forward);
  auto release = [&] {
    if (!tied) pa_.release(lg, Pass::Forward);
    if (eg >= 0) pa_.release(eg, Pass::Forward);  // backward does not read the embedding weights
  };
  if (!targets) {
    release();
    return;
  }
  float* losses = acts_.stat(acts_.chunk_acts().losses);
  // The head adds its weight's gradient here (tied: backward adds the embedding's).
  const ParamView<A>& PH = tied ? PE : P;
  float* dw = ctx.need_grad ? GradView{pa_.grads(layout_.head_group()), PH.begin}.at(spec_.head.w) : nullptr;
  A* dlnf = ctx.need_grad ? acts_.act<A>(acts_.chunk_acts().dlnf) : nullptr;
  const HeadBuffers<A> buf{acts_.stat(acts_.plan().logits), acts_.stat(acts_.plan().xmax),
                           acts_.stat(acts_.plan().xsums), acts_.act<A>(acts_.plan().dlogits), acts_.ws()};
  spec_.head.loss(k, spec_.split, losses, dlnf, dw, acts_.act<A>(acts_.chunk_acts().lnf), PH, targets, N,
                  ctx.loss_scale / static_cast<float>(N), buf);
  if (ctx.watch) watch().head(*ctx.watch, P.base, P.begin, true, f);
  release();
}

std::string GPT::use_cuda_graphs() {
  std::string why;
  if (dev_.is_cpu())
    why = "the model runs on the CPU";
  else if (!layout_.whole() || tp_ || cpa_)
    why =
        "the model is split over ranks (tensor, pipeline or context parallel): its passes exchange data through "
        "the host";
  else if (cfg_.moe.experts > 0)
    why = "MoE layers read their experts' token counts on the host";
  else if (cfg_.dropout > 0)
    why = fmt::format(
        "model.dropout={}: each micro-step's dropout masks are kernel arguments a graph would freeze "
        "(graphs capture dropout-free passes for now)",
        cfg_.dropout);
  else if (products_ != CpuProducts::Fp32)
    why = "fp16 and FP8 products are not captured yet (fp32 and bf16 are)";
  if (why.empty()) graphs_ = std::make_unique<PassGraphs>();
  return why;
}

std::string GPT::graph_summary() const {
  if (!graphs_) return "";
  if (!graphs_->failure().empty())
    return fmt::format("CUDA graphs: off after a failed capture ({} passes ran from graphs before): {}",
                       graphs_->launches(), graphs_->failure());
  return fmt::format("CUDA graphs: {} passes ran from {} captured graphs", graphs_->launches(), graphs_->captured());
}

PassGraphs* GPT::graphs_for(const StepContext& ctx) {
  if (!graphs_ || !ctx.graphs || !ctx.train || !ctx.need_grad || ctx.watch || ctx.grads_ready || pa_.stored())
    return nullptr;
  pa_.refresh_copy();  // a graph reads the bf16 copy; redrawing it when stale is the host's decision
  return graphs_.get();
}

void* GPT::chunk_input(int chunk, int set) {
  acts_.select(chunk, set);
  return acts_.message(acts_.chunk_acts().input);
}

void* GPT::chunk_output(int chunk, int set) {
  acts_.select(chunk, set);
  return acts_.message(acts_.layer(layout_.chunks()[static_cast<size_t>(chunk)].end - 1).res3);
}

void* GPT::chunk_grad(int chunk, int set) {
  acts_.select(chunk, set);
  PARALLM_CHECK(acts_.chunk_acts().grad >= 0, InternalError, "gpt", "a whole model has no gradient messages");
  return acts_.message(acts_.chunk_acts().grad);
}

PassShape GPT::pass_shape(const StepContext& ctx, int64_t B, int64_t T, int64_t pos0, KvCache* cache) const {
  PassShape f;
  f.B = B;
  f.T = T;
  f.N = B * T;
  f.C = cfg_.n_embd;
  // The residual stream's rows on this rank: all N, or (sequence parallel) N/tp from row0.
  f.Nl = f.N / token_multiple();
  const int64_t row0 = sp_ ? tp_->rank() * f.Nl : 0;
  f.p = ctx.train ? cfg_.dropout : 0.0f;
  f.drop_base = static_cast<uint64_t>((ctx.sample_offset * T + row0) * cfg_.n_embd);  // global index of element 0
  f.Tg = T * cpl_.size;
  f.by_runs = cpa_ != nullptr;
  if (cpa_) f.runs = cpl_.runs(f.Tg);
  f.pos0 = pos0;
  f.cache = cache;
  if (rope_.active()) f.rope = rope_.rows(T, pos0, f.runs);
  f.ctx = &ctx;
  return f;
}

bool GPT::decode_supported() const {
  return layout_.whole() && !tp_ && !cpa_ && compute_ == DType::F32 && k_->attention_block_forward != nullptr;
}

void GPT::decode(const int32_t* tokens, int64_t n, KvCache& cache, float* logits) {
  PARALLM_CHECK(decode_supported(), ConfigError, "gpt.decode",
                "generation with a KV cache runs the whole model on one rank in fp32 activations");
  PARALLM_CHECK(n >= 1 && cache.length() + n <= cache.capacity(), ShapeError, "gpt.decode",
                "{} new positions after the {} cached exceed the cache's {}", n, cache.length(), cache.capacity());
  const int32_t* targets = nullptr;
  begin_pass(0, 0, tokens, targets, 1, n, "gpt.decode");
  const auto copy = pa_.copy_scope(bf16_products());
  const StepContext ctx;  // eval: no dropout, no gradients
  forward_impl<float>(*k_, 0, tokens, nullptr, pass_shape(ctx, 1, n, cache.length(), &cache));
  acts_.state() = {1, n, false, false};
  cur_B_ = 1;
  cur_T_ = n;
  logits_set_ = 0;
  last_fwd_chunk_ = last_fwd_set_ = 0;
  cache.commit(n);
  logits_impl<float>(*k_, logits, 1, n, n - 1);
}

float GPT::deferred_loss() {
  return io_.deferred_loss();
}

void GPT::last_logits(float* out, int64_t B, int64_t T, int64_t pos) {
  if (pos < 0) pos = T - 1;
  PARALLM_CHECK(pos < T, ShapeError, "gpt.last_logits", "position {} is past the sequence's {} tokens", pos, T);
  const auto copy = pa_.copy_scope(bf16_products());
  if (compute_ == DType::BF16)
    logits_impl(*kb_, out, B, T, pos);
  else
    logits_impl<float>(*k_, out, B, T, pos);
}

void GPT::all_logits(float* out, int64_t B, int64_t T) {
  const auto copy = pa_.copy_scope(bf16_products());
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
  acts_.select(num_chunks() - 1, logits_set_);  // where the last stage's last forward left ln_f's output
  const int hg = layout_.head_group();
  const ParamView<A> PH{pa_.params<A>(hg, Pass::Forward), layout_.group(hg).begin};
  spec_.head.logits(k, spec_.split, out, acts_.act<A>(acts_.chunk_acts().lnf), PH, B, T, pos, dev_);
  pa_.release(hg, Pass::Forward);
}

}  // namespace parallm::model
