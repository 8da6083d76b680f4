// A training run's parts, built once by open_session (setup) and then used
// by the loop (trainer.cpp), one optimizer step (step.h), evaluation
// (evaluate.h) and the checkpoint of the state (state_io.h):
//   the resolved config (a resumed run's checkpoint config with this
//   invocation's keys laid over it), checked alike on every rank;
//   the device; the mesh over the world and its data-parallel group;
//   the dataset's vocabulary and this rank's loader;
//   the model, the gradient sync (the data-parallel strategy), the optimizer,
//   the loss scaler, the loss-spike guard and the learning-rate schedule;
//   the state a checkpoint carries (restored, or fresh weights);
//   the run directory (rank 0), opened once every check has passed, with
//   the invocation its repro.json records;
//   the straggler report (several ranks).
// Nothing here asks which data-parallel strategy runs: make_grad_sync chose it.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/loader.h"
#include "data/vocab.h"
#include "model/gpt.h"
#include "model/numeric_watch.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "optim/schedule.h"
#include "parallel/grad_sync.h"
#include "parallel/group_ops.h"
#include "parallel/mesh.h"
#include "parallel/plan.h"
#include "train/checkpoint/checkpoint.h"
#include "train/config/config.h"
#include "train/controls/control.h"
#include "train/controls/memory_watch.h"
#include "train/controls/replica_check.h"
#include "train/controls/spike_guard.h"
#include "train/controls/straggler.h"
#include "train/faults.h"
#include "train/records/metrics.h"
#include "train/records/repro.h"
#include "train/records/run_dir.h"
#include "train/records/run_lock.h"

namespace parallm::train {

struct PendingSave;  // train.async_save (checkpoint/state_io.cpp)

// What is fixed for the run once open_session has resolved it: the config,
// where and how it runs (device, mesh, plan), its data, the operator's
// invocation and the test faults, the figures the records divide by.
struct RunSetup {
  RunSetup(RunConfig c, comm::Communicator& w) : cfg(std::move(c)), world(w) {}
  RunConfig cfg;
  comm::Communicator& world;
  bool lead = false;  // world rank 0: writes files, logs, samples and checkpoints
  bool resume = false;
  nlohmann::json ck_meta;  // the checkpoint's state.json (resume)
  Device dev;
  std::unique_ptr<parallel::Mesh> mesh;
  std::unique_ptr<parallel::ParallelPlan> plan;  // what the trainer asks about the layout (parallel/plan.h)
  data::Vocab vocab;
  std::string prompt;  // the samples' prompt
  std::unique_ptr<data::Loader> loader;
  Invocation invocation;        // the command line, and every rank's host
  Faults faults;                // PARALLM_FAULT_* (tests): this rank's
  double peak = 0;              // the job's FLOP/s for MFU
  int peak_measurements = 0;    // CPU, measured: the runs' measurements the peak is the best of (rank 0's)
  int64_t tokens_per_iter = 0;  // the global batch's tokens
  double flops_per_iter = 0;    // of the global batch

  // The group holding copies of one model's weights (replicas, or ZeRO's
  // shards): gradients are averaged over it, and its rank 0 writes. The
  // data-parallel ranks, times the context-parallel ones (they hold the same
  // weights and different positions of the same samples: Mesh::dp_cp).
  comm::Communicator& dp() const { return plan->grad_group(); }
  // The ranks that read different samples, and this rank's index among them.
  int64_t data_ranks() const { return mesh->dims().dp; }
  int64_t batch() const { return cfg.train.batch_size; }
  int64_t seq() const { return cfg.model.block_size; }
  // The positions of each sequence this rank's model holds (context parallel: seq() / cp).
  int64_t local_seq() const { return plan->local_length(cfg.model.block_size); }
};

// The run's records and the operator's hold on it: the run directory and its
// lock (rank 0), the progress lines, the straggler report, the controls.
struct RunRecords {
  explicit RunRecords(std::optional<RunDir>& rd) : run_dir(rd) {}
  std::optional<RunLock> lock;                 // rank 0's: one run at a time in train.out_dir
  std::optional<RunDir>& run_dir;              // rank 0's, once opened
  std::unique_ptr<StragglerReport> straggler;  // several ranks: compute times compared every log interval
  std::unique_ptr<Progress> progress;
  std::unique_ptr<RunControl> control;  // the operator's switches, signals and time limit (control.h)
  void write_metrics(const nlohmann::json& rec) const {
    if (run_dir) run_dir->write_metrics(rec);
  }
};

// The run: its setup and records, and what trains: the model, its gradient
// sync, the optimizer, the loss scaler and schedule, the checks on them, and
// the training state a checkpoint carries.
// The bases are destroyed after the members: the model goes before the plan
// that owns its groups and pipeline stage, and the plan before the mesh.
struct Session : RunSetup, RunRecords {
  Session(RunConfig c, comm::Communicator& w, std::optional<RunDir>& rd) : RunSetup(std::move(c), w), RunRecords(rd) {}
  std::unique_ptr<model::GPT> model;  // the whole model, or this rank's stage of it
  std::unique_ptr<parallel::GradSync> sync;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::LossScaler> scaler;
  optim::LrSchedule sched;
  std::unique_ptr<SpikeGuard> guard;  // the loss-spike guard, when train.skip_*_zscore turns it on
  // train.detect_anomaly: the numeric detector, handed to each training pass (null: off).
  std::unique_ptr<model::NumericWatch> watch;
  std::unique_ptr<ReplicaCheck> replicas;     // train.check_replicas (null: off)
  TrainState st;                              // what a checkpoint carries
  bool saved_any = false;                     // a checkpoint of this run exists
  std::shared_ptr<PendingSave> pending_save;  // train.async_save: the save being written (state_io.h) ...
  std::vector<std::vector<float>> staging;    // ... and the host buffers it stages into, kept between saves
  MemoryWatch memory;                         // the resident-memory watchdog
  std::vector<float> losses;                  // the current step's (or evaluation's) pass losses, in order

  // Whether this rank runs the samples: rank 0, with the ranks of its model's
  // tensor- and context-parallel groups (data-parallel index 0) and of its
  // expert-parallel groups (the first expert-data replica), or every rank when
  // the sync gathers parameters collectively.
  bool samples() const {
    return lead || mesh->coord().dp == 0 || (mesh->dims().ep > 1 && mesh->edp().rank() == 0) ||
           sync->collective_sampling();
  }
  // The loss of one batch forward only (every pipeline stage takes part; every rank gets it).
  float forward_loss(const int32_t* x, const int32_t* y, int64_t B, int64_t T, const model::StepContext& ctx) {
    return plan->forward_loss(*model, x, y, B, T, ctx);
  }
  // The logits of position `pos` of one sequence of T tokens (generation;
  // every pipeline stage and context-parallel rank takes part).
  void last_logits(const int32_t* tokens, int64_t T, int64_t pos, float* out) {
    plan->last_logits(*model, tokens, T, pos, out);
  }
  // The multiple of T generation pads its contexts to (sequence or context parallel).
  int64_t sequence_multiple() const { return plan->sequence_multiple(*model); }
};

// Builds the run. With a checkpoint that resumes past train.max_iters, or
// train.kill_switch present, it returns no session and sets *nothing_to_do
// to the sentence saying so (the records a full disk kept in the checkpoint
// are written first). Throws
// ConfigError/IoError on bad input, before anything is written where it can.
std::unique_ptr<Session> open_session(RunConfig cfg, comm::Communicator& world, int ranks_per_node,
                                      std::optional<RunDir>& run_dir, std::string* nothing_to_do,
                                      Invocation invocation = {});

}  // namespace parallm::train
