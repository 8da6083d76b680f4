// The loss-spike guard through the trainer on 2 ranks (mpirun inside ctest):
// an injected spike (PARALLM_FAULT_SPIKE: the step's loss and gradients x100
// on every rank) is skipped with its reason in metrics.jsonl and the run goes
// on, every other update applied (the same trajectory as a run that skips
// that update for overflow under dynamic loss scaling); spikes in a row past
// train.skip_max_consecutive stop every rank with a NumericError naming the
// keys; with no spike the guarded run is bitwise the unguarded one; a run
// resumed from a checkpoint decides as the uninterrupted one (the windows are
// in the checkpoint: without them the resumed guard would still be warming up).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/dist_run.h"
#include "train/checkpoint/checkpoint.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {

using SpikeGuardDist = test_util::DistRunTest;
using test_util::world;

// An environment variable set for the scope of a test, on this rank.
struct EnvAt {
  EnvAt(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~EnvAt() { ::unsetenv(name_); }
  EnvAt(const EnvAt&) = delete;
  EnvAt& operator=(const EnvAt&) = delete;
  const char* name_;
};

// Loss z-score 5 over the last 8 applied steps (warm from iteration 8), 20 iterations.
const std::vector<std::string> kGuard = {"train.skip_loss_zscore=5", "train.skip_window=8"};

// The train records of run `out` (rank 0 reads them).
std::vector<nlohmann::json> train_records(const fs::path& dir) {
  std::vector<nlohmann::json> r;
  std::ifstream f(dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") r.push_back(std::move(j));
  }
  return r;
}

class SpikeRun : public SpikeGuardDist {
 protected:
  train::RunConfig run(const std::string& out, const std::vector<std::string>& extra, int64_t iters = 20) {
    auto c = tiny(out, 2);
    c.apply_overrides(extra);
    c.train.max_iters = iters;
    return c;
  }
};

TEST_F(SpikeRun, AnInjectedSpikeIsSkippedAndTheRunContinues) {
  train::RunSummary guarded, overflowed;
  {
    const EnvAt spike("PARALLM_FAULT_SPIKE", "14");
    guarded = train::run_training(run("guarded", kGuard), world);
  }
  {
    // The same update skipped for overflow instead: dynamic loss scaling is exact in fp32.
    const EnvAt inf("PARALLM_FAULT_INF_GRAD", "14");
    overflowed = train::run_training(run("overflowed", {"train.loss_scale=dynamic"}), world);
  }
  EXPECT_EQ(guarded.spike_skipped_steps, 1);
  ASSERT_EQ(guarded.train_losses.size(), 21u);
  ASSERT_EQ(overflowed.train_losses.size(), 21u);
  for (size_t i = 0; i < 21; ++i)
    if (i != 14) {
      EXPECT_EQ(guarded.train_losses[i], overflowed.train_losses[i]) << "iter " << i;
    }
  EXPECT_GT(guarded.train_losses[14], 50 * guarded.train_losses[13]);  // the spike itself (x100)
  EXPECT_EQ(guarded.last_val_loss, overflowed.last_val_loss);
  if (world->rank() != 0) return;
  const auto recs = train_records(root_ / "guarded");
  ASSERT_EQ(recs.size(), 21u);
  for (const auto& r : recs) {
    const bool spike = r["step"] == 14;
    ASSERT_TRUE(r.contains("skipped")) << r.dump();
    EXPECT_EQ(r["skipped"].get<bool>(), spike) << r.dump();
    EXPECT_EQ(r.contains("skip_reason"), spike) << r.dump();
    if (spike) {
      EXPECT_EQ(r["skip_reason"].get<std::string>().rfind("loss z-score ", 0), 0u) << r.dump();
    }
  }
  // The last checkpoint (the evaluation at 20) follows steps 0-19: 19 updates, the spike's not applied.
  EXPECT_EQ(train::read_checkpoint_meta((root_ / "guarded").string())["optimizer_steps"], 19);
}

TEST_F(SpikeRun, SpikesInARowPastTheLimitStopEveryRank) {
  const EnvAt spike("PARALLM_FAULT_SPIKE", "10,11,12");
  auto c = run("stopped", kGuard);
  c.apply_overrides({"train.skip_max_consecutive=2"});
  try {
    train::run_training(c, world);
    FAIL() << "rank " << world->rank() << " trained through 3 spikes in a row";
  } catch (const NumericError& e) {
    const std::string m = e.what();
    for (const char* part : {"iter 12", "3 steps in a row", "train.skip_max_consecutive=2", "train.skip_loss_zscore=5",
                             "train.skip_window=8"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " missing in: " << m;
  }
}

TEST_F(SpikeRun, WithoutASpikeTheGuardedRunIsBitwiseTheUnguardedOne) {
  std::vector<std::string> both = kGuard;
  both.push_back("train.skip_grad_zscore=5");
  const auto on = train::run_training(run("on", both), world);
  const auto off = train::run_training(run("off", {}), world);
  EXPECT_EQ(on.spike_skipped_steps, 0);
  EXPECT_EQ(on.train_losses, off.train_losses);
  EXPECT_EQ(on.last_val_loss, off.last_val_loss);
  if (world->rank() != 0) return;
  // The guard judged the steps after its warm-up (8) and saved its full window.
  const auto meta = train::read_checkpoint_meta((root_ / "on").string());
  ASSERT_TRUE(meta.contains("spike_guard")) << meta.dump();
  EXPECT_EQ(meta["spike_guard"]["loss"].size(), 8u);
  EXPECT_FALSE(train::read_checkpoint_meta((root_ / "off").string()).contains("spike_guard"));
}

TEST_F(SpikeRun, AResumedRunDecidesAsTheUninterruptedOne) {
  const EnvAt spike("PARALLM_FAULT_SPIKE", "14");
  const auto full = train::run_training(run("full", kGuard), world);
  ASSERT_EQ(full.spike_skipped_steps, 1);
  train::run_training(run("part", kGuard, 12), world);  // its last checkpoint: after step 12
  auto again = run("part", kGuard);
  again.train.init_from = train::InitFrom::Resume;
  const auto resumed = train::run_training(again, world);
  ASSERT_EQ(resumed.first_iter, 13);
  ASSERT_EQ(resumed.train_losses.size(), 8u);
  for (size_t i = 0; i < resumed.train_losses.size(); ++i)
    EXPECT_EQ(resumed.train_losses[i], full.train_losses[13 + i]) << "iter " << 13 + i;
  EXPECT_EQ(resumed.spike_skipped_steps, 1) << "the resumed guard did not skip the spike at 14";
  EXPECT_EQ(resumed.last_val_loss, full.last_val_loss);
}

}  // namespace

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
