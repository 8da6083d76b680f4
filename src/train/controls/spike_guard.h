// The loss-spike guard (train.skip_loss_zscore, train.skip_grad_zscore), as
// llm.c's outlier detector: a step whose loss or gradient norm lies more than
// Z standard deviations above the mean of the last N applied steps is not
// applied, and a run of more than M such steps in a row stops the run.
//
// Design:
// - Two windows, the losses and the gradient norms (global, unscaled) of the
//   last train.skip_window applied steps, oldest first. A skipped step's
//   values never enter them, so a spike does not widen the window that judges
//   the next one. Steps the loss scaler skips for overflow are not seen.
// - The guard acts only once the windows are full (N values: the warm-up;
//   with fewer, the mean and deviation of a young run say little).
// - The z-score is one-sided: (x - mean) / sd with the population deviation
//   of the window, computed from the stored values in order on every call
//   (two passes, no running sums). The result is a function of the window's
//   values alone, so a window restored from a checkpoint decides exactly as
//   the uninterrupted run's (running sums would carry the rounding of every
//   value ever added). N is at most 10^6: the pass is ~2N flops, nothing beside
//   a step. With sd = 0 any value above the mean is a spike.
// - Every rank must decide alike: the caller gives every rank the same bits
//   (train/loop/step.cpp broadcasts world rank 0's loss and norm), and the guard is
//   a pure function of its state and those values, so every rank holds the
//   same windows, skips the same steps and saves the same state.
// - The state (windows, skipped steps in a row, skipped in all) travels in the
//   checkpoint's state.json as the JSON of to_json(); doubles are written
//   with round-trip precision, so a resumed run holds the same bits.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace parallm::train {

struct SpikeGuardConfig {
  double loss_z = 0;             // train.skip_loss_zscore (0: off)
  double grad_z = 0;             // train.skip_grad_zscore (0: off)
  int64_t window = 100;          // train.skip_window: applied steps the mean and deviation are taken over
  int64_t max_consecutive = 10;  // train.skip_max_consecutive: more skipped steps in a row stop the run
  bool enabled() const { return loss_z > 0 || grad_z > 0; }
};

struct SpikeGuardState {
  std::vector<double> loss, grad;  // the windows, oldest first (equal lengths)
  int64_t consecutive = 0;         // steps skipped in a row, up to the last one judged
  int64_t skipped = 0;             // steps skipped by the guard in the whole run (resumes included)

  nlohmann::json to_json() const;
  // From to_json()'s form; IoError naming the field when it is malformed.
  static SpikeGuardState from_json(const nlohmann::json& j);
  bool operator==(const SpikeGuardState& o) const;
};

// How far `x` lies above the mean of `w`, in population standard deviations
// (+inf when the deviation is 0 and x is above the mean, 0 when not above).
double zscore(const std::vector<double>& w, double x);

class SpikeGuard {
 public:
  // `st`: a resumed run's state; windows longer than cfg.window keep their newest values.
  explicit SpikeGuard(const SpikeGuardConfig& cfg, SpikeGuardState st = {});

  // Judges iteration `it`'s loss and gradient norm and records the outcome:
  // "" when the step is to be applied (its values enter the windows), or why
  // it is skipped, e.g. "loss z-score 7.3 > 5". NumericError naming the keys
  // and values when this skip is more than max_consecutive in a row.
  std::string judge(int64_t it, double loss, double norm);

  // Whether the windows are full, so the guard acts.
  bool warm() const { return static_cast<int64_t>(st_.loss.size()) >= cfg_.window; }
  const SpikeGuardState& state() const { return st_; }
  const SpikeGuardConfig& config() const { return cfg_; }

 private:
  std::string reason(double loss, double norm) const;
  void push(double loss, double norm);

  SpikeGuardConfig cfg_;
  SpikeGuardState st_;
};

}  // namespace parallm::train
