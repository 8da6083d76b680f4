// The single-process training loop (nanoGPT's train.py, made exact and
// observable): evaluation every eval_interval (fixed eval batches), samples,
// checkpoints on improvement (or always), AdamW with warmup + cosine decay,
// gradient accumulation, global-norm clipping and (dynamic) loss scaling. Every log line carries
// step, loss, lr, dt, dtf, dtb, tokens/s and MFU; metrics.jsonl carries the
// same numbers for tools.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/config/config.h"
#include "train/records/repro.h"

namespace parallm::comm {
class Communicator;
}

namespace parallm::train {

struct RunSummary {
  int64_t first_iter = 0;
  int64_t last_iter = 0;
  std::vector<float> train_losses;  // per optimizer step, in order
  std::vector<double> grad_norms;   // per optimizer step, this rank's global gradient norm (unscaled)
  float last_val_loss = 0;
  float best_val_loss = 0;
  double mean_tokens_per_s = 0;     // over the timed steps (first step excluded)
  double loss_scale = 1;            // at the end (1 without loss scaling)
  int64_t skipped_steps = 0;        // updates skipped for overflow (dynamic loss scaling), resumed runs included
  int64_t spike_skipped_steps = 0;  // updates the loss-spike guard skipped, resumed runs included
  bool evaluated_only = false;      // train.eval_only: last_val_loss is the evaluation of iteration first_iter
  // Set (and nothing else) when a resumed run's checkpoint resumes past
  // train.max_iters (the last iteration): the sentence saying so; no file was touched.
  // Also set (and nothing else) when the run started with train.kill_switch present.
  std::string nothing_to_do;
  // Set when an operator's control stopped the run early (kill switch,
  // SIGUSR1/SIGTERM, train.max_duration): the sentence saying why and where
  // the state is saved. The run exits 0.
  std::string stopped;
};

// Runs training as configured over `world` (nullptr: a world of one),
// arranged on the mesh parallel.* describes (data parallel over every rank
// by default). `ranks_per_node` (0 = unknown) keeps a tensor-parallel group
// inside a node. `invocation` (the command line, the hosts) goes into the
// run's repro.json. Throws parallm::Error on bad input; the run directory
// keeps whatever was written until then.
RunSummary run_training(RunConfig cfg, comm::Communicator* world = nullptr, int ranks_per_node = 0,
                        Invocation invocation = {});

}  // namespace parallm::train
