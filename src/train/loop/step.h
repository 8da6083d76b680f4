// One optimizer step: a schedule runs the step's forward and backward passes
// (gradient accumulation over optimizer.gas micro-batches, each cut into the
// passes the gradient sync asks for; or a pipeline's schedule over its
// stages, parallel/pipeline_runtime.h), then the gradient sync finishes the
// gradients, the loss scaler decides on the global norm, the loss-spike
// guard (train/controls/spike_guard.h) on the loss and norm, and the optimizer
// updates what the sync names. The loop calls optimizer_step and never sees
// which strategy or schedule runs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/session.h"

namespace parallm::train {

struct PassTimes {
  double dtf = 0, dtb = 0;    // seconds in forward passes, and in backward passes with their gradient work
  double compute = 0;         // seconds in the passes alone, without the sync's waits (the straggler report's time)
  bool device_timed = false;  // dtf is the device's own time (settle): the rest of the step is backward's
  // Pipeline: per stage (pp rank), the share of the pipeline's span (the
  // longest stage's, from the step's first action) it spent waiting instead
  // of computing (the bubble, measured), and its mean milliseconds per F, B,
  // B-input and W action ([4 * rank + kind], 0 where it ran none); empty otherwise.
  std::vector<double> stage_idle, stage_cost_ms;
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  // Every forward and backward pass of iteration `it`, from zeroed
  // gradients; `losses` receives each pass's loss, in order.
  virtual PassTimes run(int64_t it, std::vector<float>& losses) = 0;
  // After the step's first wait for the device: the forward time as the
  // device measured it (a lone GPU process is timed by events, not by the host).
  virtual void settle(PassTimes& t) {}
  // After the optimizer step (applied or skipped).
  virtual void after_update() {}
};

// The schedule this run uses.
std::unique_ptr<Schedule> make_schedule(Session& s);

struct StepResult {
  float loss = 0;           // mean over the global batch
  double norm = 0;          // global gradient norm (unscaled)
  float scale = 1;          // the loss scale the step used
  bool applied = true;      // false: the update was skipped (overflow under dynamic loss scaling, or a loss spike)
  std::string skip_reason;  // why, when skipped
  double dt = 0, dtf = 0, dtb = 0;
  double compute = 0;                             // PassTimes' (with PARALLM_FAULT_SLOW_RANK's sleep)
  std::vector<double> stage_idle, stage_cost_ms;  // PassTimes'
  int64_t rss_bytes = 0;                          // this process's resident memory after the step
};

StepResult optimizer_step(Session& s, Schedule& schedule, int64_t it, float lr);

}  // namespace parallm::train
