// The rules between the parallel axes (plan.h), each next to the axes it
// governs, and the plan's answers about the mesh.
#include "parallel/plan.h"

#include "core/error.h"
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
  PARALLM_CHECK(!p.sequence_parallel, ConfigError, "config",
                "parallel.sequence_parallel=true with parallel.cp={}: both split the sequence (sequence parallelism "
                "inside the tp group, context parallelism across the cp group); use one of them",
                p.cp);
  PARALLM_CHECK(!p.ddp.deterministic, ConfigError, "config",
                "ddp.deterministic=true with parallel.cp={}: the deterministic reduction sums per-sample shards, and "
                "context parallelism splits the samples themselves; drop ddp.deterministic",
                p.cp);
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

std::vector<int64_t> ParallelPlan::positions(int64_t T) const {
  if (!cp_enabled()) return {};
  return model::CpLayout{dims().cp, mesh_.coord().cp, config_.cp_kind}.positions(T);
}

}  // namespace parallm::parallel
