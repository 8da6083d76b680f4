// The low-precision layout tests' shared shape (test_f16_train, test_fp8_train):
// the tiny GPT-2 of dist_run.h with a dtype's keys, 50 steps, run alone on
// every rank (the one-rank references) or over the world in a layout, and each
// layout's relative train-loss differences from the reference per step. Each
// test keeps its own bars and what it prints: the dtypes part from one rank
// in different ways (fp16 from the first steps, FP8 after some).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "parallel/dist_run.h"

namespace parallm::test_util {

class LowpLayoutTest : public DistRunTest {
 protected:
  static constexpr int64_t kIters = 49;  // 50 steps
  using Layouts = std::vector<std::pair<std::string, std::vector<std::string>>>;

  // `dtype_keys`: the dtype's overrides (train.dtype=...); `prefix` names the layouts' run directories.
  LowpLayoutTest(std::vector<std::string> dtype_keys, std::string prefix)
      : dtype_keys_(std::move(dtype_keys)), prefix_(std::move(prefix)) {}

  train::RunConfig run(const std::string& out, int64_t batch, const std::vector<std::string>& extra = {}) {
    auto c = tiny(out, batch);
    c.apply_overrides(dtype_keys_);
    c.apply_overrides({"train.max_iters=" + std::to_string(kIters),
                       "optimizer.lr_decay_iters=" + std::to_string(kIters), "train.eval_interval=25"});
    c.apply_overrides(extra);
    return c;
  }
  // The one-rank reference, on every rank (its own directory).
  train::RunSummary alone(const std::string& out, int64_t batch, const std::vector<std::string>& extra = {}) {
    return train::run_training(run(out + std::to_string(world->rank()), batch, extra));
  }
  // The layout `keys` over the world, and its relative train-loss difference from `one` at every step.
  std::pair<train::RunSummary, std::vector<double>> layout_diffs(const train::RunSummary& one, int64_t batch,
                                                                 const std::string& name,
                                                                 const std::vector<std::string>& keys) {
    auto r = train::run_training(run(prefix_ + "_" + name, batch, keys), world);
    std::vector<double> d;
    if (r.train_losses.size() == one.train_losses.size()) d = rel_diffs(r.train_losses, one.train_losses);
    return {std::move(r), std::move(d)};
  }

 private:
  std::vector<std::string> dtype_keys_;
  std::string prefix_;
};

}  // namespace parallm::test_util
