// The straggler report (train.straggler_pct, train.straggler_window).
//
// What is timed: each rank's compute in a step (StepResult::compute): its
// forward and backward passes (a pipeline stage's compute actions), without
// the time it waits in the gradient sync's collectives. A step's wall time
// cannot show a straggler: the sync makes every rank wait for the slowest,
// so every rank's dt is the slowest one's. Compute time can: the slow rank's
// is long and the others' short (they spend the difference waiting in the
// sync). Collectives inside a pass (tensor parallelism's, ZeRO-3's gathers)
// are counted as compute, so ranks of one tp group look alike.
//
// Every log interval each rank all-gathers one float over the world: its
// mean compute ms per step since the last interval. Every rank learns the
// fastest and slowest rank; rank 0 writes them into the interval's train
// record and log line. Every train.straggler_window intervals, each rank's
// mean over the window is compared with the low median (the lower middle
// value: with two ranks, the other rank's) of its peers: the ranks that do
// the same work, those of its pipeline stage (every rank without a
// pipeline). A rank more than train.straggler_pct percent above it is named
// in a warning (rank 0's log) and in the record ("stragglers"); then the
// window starts over. The run's first interval, which holds the warm-up step
// (first touches, kernels chosen), is reported but not judged.
// train.straggler_pct=0 turns the warning off.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace parallm::train {

class StragglerReport {
 public:
  // `peer_group[r]`: world rank r's peers' group (ranks compared with one
  // another); `hosts[r]`: its host (named in the warning).
  StragglerReport(comm::Communicator& world, double pct, int64_t window, std::vector<int> peer_group,
                  std::vector<std::string> hosts);

  // This rank's compute seconds in one step.
  void add(double compute_s) {
    sum_s_ += compute_s;
    ++steps_;
  }

  struct Interval {
    double min_ms = 0, max_ms = 0;  // mean compute ms per step of the fastest and the slowest rank
    int fastest = 0, slowest = 0;
    std::vector<int> stragglers;  // named at the end of a window, else empty
    std::string warning;          // the sentence naming them ("" if none)
  };
  // Collective over the world: ends the interval (every rank, the same iterations).
  Interval gather();

 private:
  void judge(Interval& iv);

  comm::Communicator& world_;
  double pct_;
  int64_t window_;
  std::vector<int> group_;
  std::vector<std::string> hosts_;
  Tensor mine_, all_;
  double sum_s_ = 0;
  int64_t steps_ = 0;
  std::vector<double> window_ms_;  // per rank: the sum of its interval means in this window
  int64_t intervals_ = 0, window_steps_ = 0;
  bool warm_ = false;  // past the first interval
};

}  // namespace parallm::train
