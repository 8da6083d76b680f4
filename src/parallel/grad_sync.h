// Gradient synchronisation: how the ranks of a data-parallel group (the
// mesh's dp group) turn their local gradients into the step's update. One
// small interface, three implementations:
//   replicas     every rank holds the whole model; gradients are averaged by
//                DDP's bucketed all-reduce, overlapped with backward (on a
//                group of one rank there is nothing to exchange);
//   deterministic replicas whose gradients and losses are summed in a fixed
//                order, bitwise the same for any split of the batch
//                (ddp.deterministic);
//   zero         ZeRO stages 1-3: optimizer state, gradients, parameters
//                sharded over the group.
// The trainer holds one GradSync (made by make_grad_sync) and never asks
// which it is: it runs every forward/backward pass with the hook the sync
// gives, tells it when a pass, a micro-step and the step end, asks it for the
// loss mean and the global gradient norm, steps the optimizer on what
// update() names, and builds its records from stats(). Checkpoints read
// held() to learn which ranges of the flat layout this rank saves and loads.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/allocator.h"
#include "model/gpt.h"
#include "parallel/zero.h"

namespace parallm::parallel {

// The data-parallel choices of a run (the config's ddp.* and zero.* keys).
struct GradSyncOptions {
  double bucket_mb = 25;       // ddp.bucket_mb
  bool deterministic = false;  // ddp.deterministic
  int64_t shards = 0;          // ddp.shards as given (0: one per rank)
  int local_shards = 1;        // deterministic on one rank: shards it computes (resolve_grad_sync fills it)
  int64_t micro_batch = 1;     // samples per rank per micro-step (model.batch_size)
  int zero_stage = 0;          // zero.stage
  int zero_prefetch = 1;       // zero.prefetch
  Offload offload = Offload::None;
};

// What the optimizer updates: parameters and gradients on `device`, reached
// through `runs` (null: the whole layout), with `state_size` elements of
// optimizer state accounted as `state_category`; `weight_copy`: the model's
// bf16 copy the step may keep current (nullptr: none).
struct UpdateTarget {
  float* params = nullptr;
  float* grads = nullptr;
  Device device = Device::cpu();
  const std::vector<model::UpdateRun>* runs = nullptr;
  int64_t state_size = 0;
  MemCategory state_category = MemCategory::OptState;
  bfloat16* weight_copy = nullptr;
};

// One step's communication, for the metrics record and the log line.
struct SyncStats {
  struct Field {
    std::string key;  // the metrics record's field
    double value = 0;
    bool integer = false;  // written as an integer (byte counts)
  };
  std::vector<Field> fields;
  std::string text;  // appended to the log line, e.g. ", comm 1.2ms (30% not overlapped)"
};

// The state a rank holds, as a checkpoint sees it. Not sharded: every rank
// holds all of it (the group's rank 0 saves it, and a load is broadcast from
// there). Sharded: this rank holds `pieces` of the flat layout (flat offset,
// count, offset in its shard) of the optimizer state, and of the parameters.
struct HeldState {
  bool sharded = false;
  std::vector<Zero::Piece> pieces;
  // Sharded: where loaded parameter pieces go (the shard, stage 3, in host
  // memory: on a GPU a copy that GradSync::to_host() refreshes and
  // from_host() takes back), or nullptr when every rank reads all parameters
  // into the model (stages 1, 2).
  float* param_shard = nullptr;
};

class GradSync {
 public:
  virtual ~GradSync() = default;
  // The log line saying how gradients are combined ("" when nothing is exchanged).
  virtual std::string describe() const = 0;
  // Forward/backward passes per micro-batch: a micro-batch of B samples is
  // cut into passes() equal parts (more than one only when one rank
  // reproduces several deterministic shards).
  virtual int passes() const { return 1; }
  // Whether the step waits for other ranks or the host inside (a lone GPU
  // process runs the step without draining the GPU when it does not).
  virtual bool communicates() const = 0;
  // Before a step's first micro-step.
  virtual void begin_step() {}
  // Before pass `pass` of micro-step `micro` (of `gas`): zeroes gradients
  // that must be computed alone, and returns the backward hook of that pass
  // (StepContext::grads_ready; null for none).
  virtual std::function<void(int)> before_pass(int micro, int gas, int pass) = 0;
  // After a pass's backward, and after a micro-step's last pass.
  virtual void after_pass(int pass) {}
  virtual void after_micro_step() {}
  // After the last micro-step: the gradients are the step's mean over the group.
  virtual void finish_step() = 0;
  // The mean over the group of the losses of `batches` batches; `local`
  // holds this rank's pass losses in order (collective).
  virtual float mean_loss(const std::vector<float>& local, int64_t batches) = 0;
  // The global L2 norm of the gradient, the same on every rank of the group;
  // with `agree_on_overflow`, infinite on every rank when it is not finite
  // on one (collective).
  virtual double grad_norm(bool agree_on_overflow) = 0;
  // What the optimizer steps on; after the step, updated() spreads the new
  // parameters (`copy_written`: the step kept the model's bf16 copy current).
  virtual UpdateTarget update() = 0;
  virtual void updated(bool copy_written) = 0;
  // Initial weights (every rank draws the same) and weights set from a
  // checkpoint: each rank ends with what it holds of them.
  virtual void init_params(uint64_t seed) = 0;
  virtual void params_loaded() = 0;
  // Not sharded: whether this rank reads a checkpoint (the first replica's
  // ranks: with expert parallelism, each rank of the first ep group its
  // experts), and the same spread for a buffer of the whole layout `x` (an
  // optimizer moment) as params_loaded does for the parameters (collective).
  virtual bool reads_checkpoint() const { return true; }
  virtual void spread(float* x) {}
  virtual HeldState held() const = 0;
  // Where held().param_shard is a host copy of device memory: refreshed from
  // the device (before it is read), and taken back (after it was written).
  virtual void to_host() {}
  virtual void from_host() {}
  // Sharded save: this rank's parameter pieces in host memory, copied into
  // `out` (shard-sized; a CPU's stage 3 returns its shard). Not sharded: the
  // model's parameters.
  virtual const float* params_to_save(Array<float>& out) const = 0;
  // Sharded: layout group g of a shard-sized buffer (`local`: an optimizer
  // moment, or the stage-3 parameter shard) whole on the group's rank `root`,
  // into `out` (the group's length; nullptr elsewhere). Collective over the
  // data-parallel group; a tensor-parallel checkpoint assembles the whole
  // model from it group by group (train/checkpoint/state_io.h).
  virtual void gather_group(const float* local, int g, float* out, int root);
  // Whether every rank must take part in sampling (parameters are gathered collectively).
  virtual bool collective_sampling() const { return false; }
  virtual SyncStats stats() const { return {}; }
  // Extra lines for the memory report at the first step.
  virtual std::string memory_note(const MemStats& peak) const { return ""; }
};

// `opt` checked against a data-parallel group of `dp_size` ranks, with
// local_shards filled in: ddp.shards=N on one rank cuts each micro-batch
// into N passes (reproducing N ranks); on several ranks each rank is one
// shard. ConfigError naming the keys otherwise (before anything is made).
GradSyncOptions resolve_grad_sync(GradSyncOptions opt, int dp_size);

// The strategy `opt` (resolved) names, over the data-parallel group `dp`, for model `m`
// (a ZeRO stage from 2 becomes the model's parameter store). `tp`: the ranks
// holding one whole model between them (tensor x pipeline parallel: the
// gradient norm sums over them, counting a replicated parameter once and a
// tied copy not at all; ZeRO shards each rank's part over `dp`), or nullptr.
// Expert parallel, `tp` is the tensor x pipeline x expert-parallel group and
// `experts` the expert-data group, over which the experts' gradients are
// reduced (DDP) or their state sharded (ZeRO); not the deterministic reduction (ConfigError).
std::unique_ptr<GradSync> make_grad_sync(comm::Communicator& dp, model::GPT& m, Device dev, const GradSyncOptions& opt,
                                         comm::Communicator* tp = nullptr, comm::Communicator* experts = nullptr);

// Storage the model keeps itself under `opt` (ZeRO stage 2 drops the
// gradient buffer, stage 3 the parameters too).
model::GPTStorage model_storage(const GradSyncOptions& opt, DType compute);

}  // namespace parallm::parallel
