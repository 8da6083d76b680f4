// Memory planner: the per-rank bytes of each category a training run will
// allocate, computed from the same functions the model (GPT::buffers) and
// ZeRO (Zero::sizes) size their allocations with, so for fp32 runs the
// prediction is what the allocator then measures. Tensor (and sequence)
// parallelism enter through the same functions: the layout of one tp rank
// (ParamLayout for tp) and the model's buffers for (tp, sp, model.recompute);
// pipeline parallelism through the planned stage's layers and the activation
// sets its schedule keeps in flight.
// Without a model shape
// (only a parameter count) it applies the seeds' quick rules to the training
// state: fp32 AdamW 16 bytes per parameter (4 params + 4 grads + 8 moments),
// bf16 mixed precision 18 (2 bf16 params + 4 fp32 grads + 12 fp32 master and
// moments), sharded by stage: 1 the optimizer part, 2 also the gradients,
// 3 everything.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gpt.h"
#include "parallel/zero.h"

namespace parallm::train {

struct PlanInput {
  std::optional<model::GPTConfig> model;  // the shape; else only `params`
  double params = 0;                      // parameter count (used when there is no model)
  std::string dtype = "fp32";             // fp32 | bf16 (mixed-precision AdamW)
  int world = 1;                          // data-parallel ranks
  int tp = 1;                             // tensor-parallel degree (each rank holds 1/tp of the split layers)
  int ep = 1;                             // expert-parallel degree (each rank holds 1/ep of the experts)
  bool sequence_parallel = false;         // Megatron SP: the residual stream's activations / tp too
  model::PipelinePart pipe;               // pipeline parallel: the planned rank's stage (Pipeline::stage_part)
  int prefetch = 1;                       // ZeRO stage 3 blocks gathered ahead
  parallel::Offload offload = parallel::Offload::None;  // ZeRO offload (params: stage 3 only)
  model::CpLayout cp;  // context parallel: each sequence split over cp.size ranks (ZeRO shards over world x cp)
  int64_t micro_batch = 1, seq_len = 1;  // per rank; seq_len the whole sequence (context parallel too)
  int threads = 1;                       // kernel workspaces depend on it
};

// Predicted peak bytes of one rank (rank 0, which holds the largest shards).
struct PlanBytes {
  double params = 0, grads = 0, optimizer = 0, activations = 0, comm = 0, scratch = 0;
  double offloaded = 0;  // in the host pool (not device memory)
  bool exact = false;    // from the model's own sizing (fp32 with a shape), not a rule of thumb
  double state() const { return params + grads + optimizer; }
  double total() const { return state() + activations + comm + scratch; }  // device memory
};

// A stage the offload setting does not apply to (offload at stage 0, params below 3) plans without offload.
PlanBytes plan_memory(const PlanInput& in, int stage);
// Training-state bytes per parameter by the quick rule (16 fp32, 18 bf16, sharded by stage).
double state_bytes_per_param(const std::string& dtype, int stage, int world);
// The seeds' GPU count: ceil(params_in_billions x 18 x 1.25 / gpu_gb).
int64_t gpus_needed(double params, double gpu_gb);
// The lowest stage whose total fits in `device_bytes` (stages 0-2 move about
// 2x the gradient bytes per step, stage 3 about 3x), or -1.
int stage_that_fits(const PlanInput& in, double device_bytes);
// A lower bound of the bytes one rank of a CPU training run allocates, in
// closed form and saturating at UINT64_MAX, so it is cheap and exact for any
// sizes (no layout is built): the fp32 parameters, gradients and AdamW moments
// the rank keeps whole at this ZeRO stage (shards count as nothing: the world
// size is not known), and the micro-batch's fp32 activations and backward
// scratch (16 N C floats per block and 13 N C more, N = micro_batch x
// block_size). RunConfig::validate() compares it with the machine's memory.
uint64_t min_run_bytes(const model::GPTConfig& m, int64_t micro_batch, int stage);
// "80B", "124M", "2e9", "10.65M" -> parameters; "80GB", "80GiB", "512MB" -> bytes. Throws ConfigError naming `what`.
double parse_count(const std::string& s, const std::string& what);
double parse_bytes(const std::string& s, const std::string& what);

}  // namespace parallm::train
