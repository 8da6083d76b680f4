// The run's parallel plan (issue 45), built from the parallel section of the
// configuration (parallel_config.h: the keys, and the rules between the axes,
// each next to the axes it governs): once the mesh exists, the one object the
// trainer asks about the layout (ParallelPlan): which axes are on and which group averages
// the gradients, as torchtitan's ParallelDims answers `tp_enabled`. The plan
// applies the model-parallel axes in one place (apply_to_model, as
// torchtitan's parallelize): the tensor and context groups the layers
// communicate over, the pipeline stage and its schedule; the passes the
// trainer runs outside a step (a loss, a sequence's logits) go through it, so
// the trainer never asks which axes are on. It also says what this rank
// contributes to a checkpoint (checkpoint_share).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/fp8.h"
#include "model/config.h"
#include "model/cp_layout.h"
#include "model/gpt.h"
#include "parallel/checkpoint_share.h"
#include "parallel/context_parallel.h"
#include "parallel/mesh.h"
#include "parallel/parallel_config.h"
#include "parallel/pipeline_runtime.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero.h"

namespace parallm::parallel {

class ParallelPlan {
 public:
  ParallelPlan(Mesh& mesh, const ParallelConfig& config);
  ~ParallelPlan();
  Mesh& mesh() const { return mesh_; }
  const MeshDims& dims() const { return mesh_.dims(); }
  const ParallelConfig& config() const { return config_; }
  bool dp_enabled() const { return dims().dp > 1; }
  bool tp_enabled() const { return dims().tp > 1; }
  bool sp_enabled() const { return tp_enabled() && config_.sequence_parallel; }
  bool pp_enabled() const { return dims().pp > 1; }
  bool cp_enabled() const { return dims().cp > 1; }
  bool ep_enabled() const { return dims().ep > 1; }
  // The ranks whose gradients are averaged, and over which the data is split
  // by samples: the data-parallel group, with context parallelism the
  // data-parallel x context-parallel one (cp ranks hold parts of the same
  // samples, and their gradients are partial sums over positions).
  comm::Communicator& grad_group() const { return cp_enabled() ? mesh_.dp_cp() : mesh_.dp(); }
  // The positions of a sequence of T this rank holds (context parallel), or
  // none (every position).
  std::vector<int64_t> positions(int64_t T) const;
  // How many positions of a sequence of T this rank holds.
  int64_t local_length(int64_t T) const { return T / dims().cp; }

  // The model with every model-parallel axis applied: this rank's tensor
  // part (and sequence parallelism), its pipeline stage (`pipe`: the
  // schedule's shape; `fault`: a test's mid-step stop) and its positions of
  // each sequence, for batches of `batch` samples. ConfigError where the
  // device's exchanges need a backend the mesh does not have. Once per plan:
  // the model points to the groups and stage the plan owns, so it must not
  // outlive the plan.
  std::unique_ptr<model::GPT> apply_to_model(const model::GPTConfig& cfg, int64_t batch, Device dev,
                                             model::GPTStorage storage, const PipelineConfig& pipe,
                                             MidStepFault fault = {});
  Pipeline* pipeline() const { return pipe_.get(); }  // null without pipeline parallelism
  // FP8 tensorwise scaling (storage.fp8_tensorwise): the maximum over this rank's pipeline stage (every rank
  // with its pp coordinate), for the training passes' kernels::Fp8TensorwiseScope; off otherwise.
  kernels::Fp8Tensorwise fp8_tensorwise() const;
  // Forward only over every stage: the batch's loss on every rank.
  float forward_loss(model::GPT& m, const int32_t* x, const int32_t* y, int64_t B, int64_t T,
                     const model::StepContext& ctx);
  // The logits of position `pos` of one whole sequence of T tokens (every
  // stage and context-parallel rank takes part; every rank gets them).
  void last_logits(model::GPT& m, const int32_t* tokens, int64_t T, int64_t pos, float* out);
  // The multiple of T a pass must be (sequence or context parallel; 1 otherwise).
  int64_t sequence_multiple(const model::GPT& m) const;
  // A log line on how sequences of T are split (context parallel), or "".
  std::string sequence_text(int64_t T) const;
  // v[0, n) summed over the pipeline's stages (collective over the pp group; itself without a pipeline).
  void sum_over_stages(float* v, int64_t n) const;
  // Every pipeline stage's value of `mine` (collective over the pp group), by stage; empty without a pipeline.
  std::vector<int64_t> by_stage(int64_t mine) const;
  // This rank's share of a checkpoint of the whole layout `whole`
  // (checkpoint_share.h): `local()` gives its part `part` (host floats: the
  // model's parameters and the optimizer's moments, shards where `sync`
  // holds shards), asked for only on the ranks that contribute. Replicated
  // state is gathered whole on one rank; ZeRO shards are written by every
  // rank (with tensor parallelism, assembled into whole groups); a
  // pipeline's stages are gathered whole. Collective (it may gather here,
  // and in the share's data). The share refers to `part`, `whole`, `sync`
  // and the buffers: write it (write_checkpoint) before any of them changes.
  CheckpointShare checkpoint_share(const model::ParamLayout& part, const model::ParamLayout& whole,
                                   const std::function<StateBuffers()>& local, GradSync& sync) const;

 private:
  Mesh& mesh_;
  ParallelConfig config_;
  std::unique_ptr<TensorParallelGroup> tp_;
  std::unique_ptr<TensorParallelGroup> data_;  // MoE: the routing counts' sums over grad_group()
  std::unique_ptr<TensorParallelGroup> ep_;    // MoE: the experts' split and the tokens' exchange
  std::unique_ptr<ContextParallelGroup> cp_;
  std::unique_ptr<Pipeline> pipe_;
  bool fp8_tensorwise_ = false;
  std::unique_ptr<comm::Communicator> stage_comm_;  // FP8 tensorwise: this rank's pipeline stage
  std::unique_ptr<TensorParallelGroup> stage_;
};

}  // namespace parallm::parallel
