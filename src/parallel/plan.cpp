// The rules between the parallel axes (plan.h), each next to the axes it
// governs, and the plan's answers about the mesh.
#include "parallel/plan.h"

#include <cstring>

#include "core/error.h"
#include "core/tensor.h"
#include "parallel/pipeline_stages.h"

namespace parallm::parallel {

// The pipeline's keys against each other and the model.
void check_pipeline(const ParallelConfig& p, const model::GPTConfig& m) {
  PARALLM_CHECK(p.pp_virtual == 1 || p.pp_schedule == PipeKind::Interleaved, ConfigError, "config",
                "parallel.pp_virtual={} needs parallel.pp_schedule=interleaved (got {})", p.pp_virtual,
                pipe_kind_name(p.pp_schedule));
  if (p.pp == 1) {
    PARALLM_CHECK(p.pp_layers.empty(), ConfigError, "config", "parallel.pp_layers is for parallel.pp > 1");
    PARALLM_CHECK(p.pp_virtual == 1, ConfigError, "config",
                  "parallel.pp_virtual={} is for parallel.pp > 1 (chunks per pipeline rank)", p.pp_virtual);
    return;
  }
  stage_layer_counts(m.n_layer, static_cast<int>(p.pp * p.pp_virtual), p.pp_layers);
  PARALLM_CHECK(p.zero.stage < 2, ConfigError, "config",
                "zero.stage={} with parallel.pp={}: a pipeline accumulates each stage's gradients over the step's "
                "micro-batches in between other micro-batches' passes, which stages 2 and 3 shard away after every "
                "backward; use zero.stage=1 (optimizer state sharded over dp) or 0",
                p.zero.stage, p.pp);
  PARALLM_CHECK(!p.ddp.deterministic, ConfigError, "config",
                "ddp.deterministic=true with parallel.pp={}: the deterministic reduction is not built for pipelines "
                "yet; drop ddp.deterministic",
                p.pp);
  PARALLM_CHECK(p.pp_schedule != PipeKind::ZeroBubble || m.recompute == model::Recompute::None, ConfigError, "config",
                "model.recompute={} with parallel.pp_schedule=zb-h1: the weight half of the backward would need the "
                "recomputed buffers again; use model.recompute=none",
                model::recompute_name(m.recompute));
}

// Context parallelism against the model and the other axes.
void check_context(const ParallelConfig& p, const model::GPTConfig& m) {
  model::check_cp_layout(p.cp_kind, static_cast<int>(p.cp), m.block_size, m.n_head, static_cast<int>(p.tp));
  if (p.cp == 1) return;
  PARALLM_CHECK(
      m.moe.experts == 0 || m.moe.capacity == 0, ConfigError, "config",
      "model.moe_capacity_factor={} with parallel.cp={}: a sequence's capacity counts its positions in order, "
      "which context parallelism splits over ranks (not built yet); use model.moe_capacity_factor=0",
      m.moe.capacity, p.cp);
  PARALLM_CHECK(!p.sequence_parallel, ConfigError, "config",
                "parallel.sequence_parallel=true with parallel.cp={}: both split the sequence (sequence parallelism "
                "inside the tp group, context parallelism across the cp group); use one of them",
                p.cp);
  PARALLM_CHECK(!p.ddp.deterministic, ConfigError, "config",
                "ddp.deterministic=true with parallel.cp={}: the deterministic reduction sums per-sample shards, and "
                "context parallelism splits the samples themselves; drop ddp.deterministic",
                p.cp);
}

// Expert parallelism against the model and the data-parallel strategies.
void check_experts(const ParallelConfig& p, const model::GPTConfig& m) {
  PARALLM_CHECK(m.moe.bias_rate == 0 || (p.zero.stage < 3 && p.zero.offload == Offload::None), ConfigError, "config",
                "model.moe_bias_update_rate={} with zero.stage={} zero.offload={}: the bias is moved in the model's "
                "parameters, which sharded parameters and an offloaded master copy do not hold; use zero.stage<=2 "
                "without offload",
                m.moe.bias_rate, p.zero.stage, offload_name(p.zero.offload));
  if (p.ep == 1) return;
  PARALLM_CHECK(m.moe.experts > 0, ConfigError, "config",
                "parallel.ep={} splits the experts of mixture-of-experts layers, but the model has none "
                "(model.moe_experts=0)",
                p.ep);
  PARALLM_CHECK(m.moe.experts % p.ep == 0, ConfigError, "config",
                "parallel.ep={} does not divide model.moe_experts={}: every rank of an expert-parallel group holds "
                "the same number of experts",
                p.ep, m.moe.experts);
  PARALLM_CHECK(!p.ddp.deterministic, ConfigError, "config",
                "ddp.deterministic=true with parallel.ep={}: the deterministic reduction is for replicas of the whole "
                "model; drop ddp.deterministic",
                p.ep);
}

// The axes of the mesh against each other and the model.
void check_layout(const ParallelConfig& p, const model::GPTConfig& m) {
  PARALLM_CHECK(m.n_head % p.tp == 0, ConfigError, "config",
                "model.n_head={} is not divisible by parallel.tp={}: tensor parallelism splits attention by heads; "
                "pick a parallel.tp that divides {}",
                m.n_head, p.tp, m.n_head);
  PARALLM_CHECK(!p.sequence_parallel || p.tp > 1, ConfigError, "config",
                "parallel.sequence_parallel=true splits the residual stream over the tensor-parallel group, but "
                "parallel.tp=1; set parallel.tp > 1 or sequence_parallel=false");
  PARALLM_CHECK(!p.sequence_parallel || m.block_size % p.tp == 0, ConfigError, "config",
                "parallel.sequence_parallel=true splits the sequence over parallel.tp={}, but model.block_size={} is "
                "not divisible by it",
                p.tp, m.block_size);
  check_pipeline(p, m);
  check_context(p, m);
  check_experts(p, m);
  PARALLM_CHECK(
      p.ddp.shards == 0 || m.moe.experts == 0, ConfigError, "config",
      "ddp.shards={} with model.moe_experts={}: one rank's shards run as separate passes, and the balancing "
      "loss counts a pass's tokens, not the micro-batch's; leave ddp.shards at 0 (one per data-parallel rank)",
      p.ddp.shards, m.moe.experts);
  PARALLM_CHECK(p.ddp.shards == 0 || p.ddp.deterministic, ConfigError, "config",
                "ddp.shards={} only applies with ddp.deterministic=true", p.ddp.shards);
  PARALLM_CHECK(p.zero.offload == Offload::None || p.zero.stage > 0, ConfigError, "config",
                "zero.offload={} needs a sharded stage (zero.stage=1, 2 or 3)", offload_name(p.zero.offload));
  PARALLM_CHECK(p.zero.offload != Offload::Params || p.zero.stage == 3, ConfigError, "config",
                "zero.offload=params needs zero.stage=3 (sharded parameters), got zero.stage={}", p.zero.stage);
  PARALLM_CHECK(p.zero.stage == 0 || !p.ddp.deterministic, ConfigError, "config",
                "zero.stage={} with ddp.deterministic=true: the deterministic reduction is for plain data parallel "
                "(zero.stage=0)",
                p.zero.stage);
}

ParallelPlan::ParallelPlan(Mesh& mesh, const ParallelConfig& config) : mesh_(mesh), config_(config) {}

ParallelPlan::~ParallelPlan() = default;

std::vector<int64_t> ParallelPlan::positions(int64_t T) const {
  if (!cp_enabled()) return {};
  return model::CpLayout{dims().cp, mesh_.coord().cp, config_.cp_kind}.positions(T);
}

std::unique_ptr<model::GPT> ParallelPlan::apply_to_model(const model::GPTConfig& cfg, int64_t batch, Device dev,
                                                         model::GPTStorage storage, const PipelineConfig& pipe,
                                                         MidStepFault fault) {
  PARALLM_CHECK(!tp_, InternalError, "plan", "apply_to_model runs once (the model points to the groups it makes)");
  tp_ = std::make_unique<TensorParallelGroup>(mesh_.tp(), dev);
  if (cp_enabled()) cp_ = std::make_unique<ContextParallelGroup>(mesh_.cp(), dev);
  if (pp_enabled()) pipe_ = std::make_unique<Pipeline>(pipe, mesh_, fault);
  fp8_tensorwise_ = storage.fp8_tensorwise;
  if (fp8_tensorwise_ && mesh_.world().size() / dims().pp > 1) {  // every rank of this stage, by world rank
    stage_comm_ = mesh_.world().split(mesh_.coord().pp, mesh_.world().rank(), "fp8_stage");
    stage_ = std::make_unique<TensorParallelGroup>(*stage_comm_, dev);
  }
  if (cfg.moe.experts > 0 && grad_group().size() > 1) {  // MoE: the routing counts' group, the experts' split
    data_ = std::make_unique<TensorParallelGroup>(grad_group(), dev);
    if (ep_enabled()) ep_ = std::make_unique<TensorParallelGroup>(mesh_.ep(), dev);
  }
  return std::make_unique<model::GPT>(cfg, batch, cfg.block_size / dims().cp, dev, storage, tp_.get(),
                                      config_.sequence_parallel, pipe_ ? pipe_->part() : model::PipelinePart{},
                                      model::ContextPart{cp_.get(), config_.cp_kind},
                                      model::ExpertPart{data_.get(), ep_.get()});
}

kernels::Fp8Tensorwise ParallelPlan::fp8_tensorwise() const {
  if (!fp8_tensorwise_) return {};
  if (!stage_) return {true, {}};  // the stage is this rank: its maximum is the tensor's
  return {true, {[](void* g, float* a, int64_t n) { static_cast<TensorParallelGroup*>(g)->max(a, n); }, stage_.get()}};
}

float ParallelPlan::forward_loss(model::GPT& m, const int32_t* x, const int32_t* y, int64_t B, int64_t T,
                                 const model::StepContext& ctx) {
  return pipe_ ? pipe_->forward_loss(m, x, y, B, T, ctx) : m.forward(x, y, B, T, ctx);
}

void ParallelPlan::last_logits(model::GPT& m, const int32_t* tokens, int64_t T, int64_t pos, float* out) {
  const auto logits = [&](const int32_t* t, int64_t Tn, int64_t at) {
    if (pipe_) return pipe_->last_logits(m, t, Tn, at, out);
    m.forward(t, nullptr, 1, Tn, {});
    m.last_logits(out, 1, Tn, at);
  };
  if (!cp_) return logits(tokens, T, pos);
  // Every cp rank runs its positions; the rank holding `pos` has the logits (the others' are dropped).
  const model::CpLayout& l = m.cp_layout();
  std::vector<int32_t> mine(static_cast<size_t>(T / l.size));
  l.slice(tokens, mine.data(), 1, T);
  const auto [owner, row] = l.owner(pos, T);
  logits(mine.data(), T / l.size, row);
  mesh_.cp().broadcast(Tensor::view_of(out, {m.config().vocab_size}, DType::F32, Device::cpu()), owner);
}

int64_t ParallelPlan::sequence_multiple(const model::GPT& m) const {
  return cp_enabled() ? m.cp_layout().multiple() : m.token_multiple();
}

std::string ParallelPlan::sequence_text(int64_t T) const {
  if (!cp_enabled()) return "";
  return fmt::format("context parallel: each sequence of {} split over {} ranks ({}{}), {} positions a rank", T,
                     dims().cp, model::cp_kind_name(config_.cp_kind),
                     config_.cp_kind == model::CpKind::Ring ? ", zigzag" : "", T / dims().cp);
}

void ParallelPlan::sum_over_stages(float* v, int64_t n) const {
  if (pp_enabled()) mesh_.pp().all_reduce(Tensor::view_of(v, {n}, DType::F32, Device::cpu()));
}

std::vector<int64_t> ParallelPlan::by_stage(int64_t mine) const {
  if (!pp_enabled()) return {};
  comm::Communicator& pp = mesh_.pp();
  Tensor t = Tensor::empty({2}, DType::I32), all = Tensor::empty({2 * pp.size()}, DType::I32);
  std::memcpy(t.raw(), &mine, sizeof mine);  // as two int32 words, exact
  pp.all_gather(t, all);
  std::vector<int64_t> out(static_cast<size_t>(pp.size()));
  std::memcpy(out.data(), all.raw(), out.size() * sizeof(int64_t));
  return out;
}

CheckpointShare ParallelPlan::checkpoint_share(const model::ParamLayout& part, const model::ParamLayout& whole,
                                               const std::function<StateBuffers()>& local, GradSync& sync) const {
  comm::Communicator& dp = grad_group();
  if (!sync.held().sharded) {  // replicated: the model-parallel group (with its experts) of the first replica holds it
    const bool writes = sync.reads_checkpoint();
    return gathered_whole(mesh_.model(), writes, part, whole, writes ? local() : StateBuffers{});
  }
  // A pipeline stage, or expert parallel (the experts' pieces over the expert-data group): whole on the first ep group.
  if (pp_enabled() || ep_enabled()) return zero_stage_whole(dp, mesh_.model(), sync, part, whole, local(), dims().ep);
  if (tp_enabled()) return zero_tp_groups(dp, mesh_.tp(), sync, part, whole, local());
  return zero_shards(dp, sync, part, local());
}

}  // namespace parallm::parallel
