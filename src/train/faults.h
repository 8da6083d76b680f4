// Fault injection for tests, every PARALLM_FAULT_* hook in one place
// (docs/operations.md lists them): read from the environment once, before
// anything is written (a malformed value is a ConfigError naming it), then
// called by the step at fixed points. Each hook does nothing when its
// variable is unset.
//   PARALLM_FAULT_INF_GRAD="3,7"       an inf in the reduced gradients at iterations 3 and 7 (overflow handling)
//   PARALLM_FAULT_SPIKE="30,31"        the loss and reduced gradients times 100 (the loss-spike guard)
//   PARALLM_FAULT_SCALE=NAME:FACTOR:I  a parameter times FACTOR before each step from iteration I (the detector)
//   PARALLM_FAULT_SLOW_RANK=R:MS       world rank R sleeps MS ms before each step's passes (the straggler report)
//   PARALLM_FAULT_STOP_RANK=R:I:S      world rank R raises SIGKILL or SIGSTOP halfway through the pipeline actions
//                                      of iteration I (a stage that dies or hangs; parallel/pipeline_runtime.h)
//   PARALLM_FAULT_LEAK=KB              every rank keeps KB KiB more (allocated, touched, never freed) each step
//                                      (the resident-memory watchdog, controls/memory_watch.h)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "parallel/grad_sync.h"
#include "parallel/pipeline_runtime.h"
#include "train/config/config.h"

namespace parallm::train {

// PARALLM_FAULT_SCALE: from iteration `from` on, parameter `param` is multiplied by `factor` before each step.
struct ScaleFault {
  std::string param;  // the whole model's slot name (transformer.h.1.mlp.c_fc.weight)
  float factor = 1;
  int64_t from = -1;  // -1: no fault
};

struct Faults {
  std::vector<int64_t> inf_iters, spike_iters;
  ScaleFault scale;
  double slow_s = 0;            // this rank's extra seconds per step
  parallel::MidStepFault stop;  // this rank's, for the pipeline
  int64_t leak_kb = 0;          // PARALLM_FAULT_LEAK

  // This rank's faults (ConfigError naming a malformed variable).
  static Faults from_env(int world_rank);
  // The scale fault's parameter is one of the model's, held whole (zero.stage=0).
  void check(const RunConfig& cfg) const;

  // Before the step's passes: the scale fault on the model's parameters, then
  // the slow rank's sleep; returns the seconds slept.
  double before_passes(model::GPT& m, int64_t it) const;
  // After the gradient sync: the inf and the spike in the gradients the optimizer reads.
  void after_sync(parallel::GradSync& sync, const model::ParamLayout& layout, int64_t it) const;
  // The step's mean loss, spiked where asked.
  float loss(float mean, int64_t it) const;
  // After a step: the planted leak's KB (kept reachable: not a leak to LeakSanitizer, one to the watchdog).
  void leak() const;
};

}  // namespace parallm::train
