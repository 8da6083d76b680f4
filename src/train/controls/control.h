// The operator's controls of a long run (docs/operations.md): the kill
// switch (train.kill_switch), the save switch (train.save_switch), the
// preemption signals (SIGUSR1, SIGTERM: core/stop_signal.h) and the time
// limit (train.max_duration, or the scheduler job's end time).
//
// Design: no rank acts alone. After every step each rank sets a few flags
// from what it sees (a switch file, a signal it received, whether its clock
// says the limit is near; rank 0 also whether its records were written) and
// one all-reduce (MAX) of those few integers gives every rank the same
// decision at the same iteration: save a step-numbered checkpoint, then
// either train on (save switch) or stop and exit 0. The flags are polled
// after a step, which is "before the next one"; a job started with the kill
// switch present stops before anything is read or written (kill_switch_at_start).
// Rank 0 alone deletes the save switch, once the save succeeded.
#pragma once
#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "core/timer.h"
#include "train/config/config.h"

namespace parallm::train {

struct ControlDecision {
  bool save = false;          // save a step-numbered checkpoint now
  bool stop = false;          // and then stop: exit 0 on every rank
  bool records_lost = false;  // rank 0 could not write a record (the trainer stops with an error)
  std::string why;            // the save's or stop's reason, one sentence
};

class RunControl {
 public:
  // Collective over `world`, before anything is written: resolves the time
  // limit (train.max_duration=auto: rank 0 asks the scheduler).
  RunControl(const RunConfig& cfg, comm::Communicator& world);
  // After iteration `it`, which took `iter_s` seconds (evaluation included);
  // `records_ok`: this rank's records were all written. Collective: every
  // rank gets the same decision.
  ControlDecision vote(int64_t it, double iter_s, bool records_ok);
  // After a save the decision asked for, which took `seconds`: rank 0
  // deletes the save switch if that was why.
  void saved(const ControlDecision& d, double seconds);
  // Seconds left until train.max_duration (infinity when there is none).
  double time_left_s() const;

 private:
  std::string duration_text() const;

  const TrainSection& t_;
  comm::Communicator& world_;
  double limit_s_ = 0;  // from clock_'s start; 0 = none
  Timer clock_;
  double longest_iter_s_ = 0, last_save_s_ = 0;
};

// Collective, first thing (nothing read or written yet): the sentence a run
// started with train.kill_switch present exits 0 with ("" otherwise), so
// queued jobs burn through without touching the run.
std::string kill_switch_at_start(const TrainSection& t, comm::Communicator& world);

}  // namespace parallm::train
