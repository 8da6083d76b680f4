// The parallel section of a run's configuration (the `parallel.*`, `ddp.*`
// and `zero.*` keys) and the rules between the axes they set, apart from the
// plan that applies them (plan.h): light, so the trainer's configuration
// includes it without the model, the mesh or ZeRO.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/cp_layout.h"
#include "parallel/pipeline_schedule.h"

namespace parallm::parallel {

enum class Offload { None, Optimizer, Params };
Offload parse_offload(const std::string& s);  // none | optimizer | params (ConfigError otherwise)
const char* offload_name(Offload o);

struct DdpConfig {
  double bucket_mb = 25;       // gradient bucket size for the all-reduce
  bool deterministic = false;  // fixed reduction order: bitwise equal for any split of the batch
  int64_t shards = 0;          // deterministic: shards per global micro-batch (0 = one per data-parallel rank)
};

struct ZeroConfig {
  int64_t stage = 0;     // 0 = DDP, 1 = sharded optimizer state, 2 = + gradients, 3 = + parameters
  int64_t prefetch = 1;  // stage 3: blocks gathered ahead
  Offload offload = Offload::None;
};

// The device mesh (mesh.h) and the data-parallel strategy on it.
struct ParallelConfig {
  int64_t dp = 0;  // 0: the world size / (tp x pp x cp)
  int64_t tp = 1, pp = 1, cp = 1;
  int64_t ep = 1;  // expert parallel: each MoE layer's experts split over groups of ep of the dp x cp ranks
  bool tp_across_nodes = false;
  bool sequence_parallel = false;  // Megatron SP inside the tp group
  PipeKind pp_schedule = PipeKind::OneFOneB;
  model::CpKind cp_kind = model::CpKind::Ring;  // context parallel: ring attention or Ulysses
  int64_t pp_virtual = 1;                       // chunks per pipeline rank (interleaved)
  std::vector<int64_t> pp_layers;               // layers per virtual stage, in order (empty: balanced)
  DdpConfig ddp;
  ZeroConfig zero;
};

// The axes against each other and the model: ConfigError naming the keys
// (tensor parallelism's heads, sequence parallelism's tp and sequence,
// the pipeline's layers and schedule, context parallelism's split, the
// data-parallel strategies that each axis takes or refuses).
void check_layout(const ParallelConfig& p, const model::GPTConfig& m);
void check_pipeline(const ParallelConfig& p, const model::GPTConfig& m);
void check_context(const ParallelConfig& p, const model::GPTConfig& m);
void check_experts(const ParallelConfig& p, const model::GPTConfig& m);

}  // namespace parallm::parallel
