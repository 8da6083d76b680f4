// Context parallelism through the trainer, under mpirun: runs with each
// sequence split over cp ranks (ring and Ulysses) against one rank with the
// whole sequence (each rank runs that reference alone), at batch 1 and 3,
// with dp, tp and pp beside cp, ZeRO over dp x cp, and a cp checkpoint
// resumed by one rank. Dropout 0.1, vocabulary 65 (no degree divides it),
// 12 heads (Ulysses at tp x cp = 4 gives each rank 3).
// CI runs 12 steps at T = 64 (chunks of 8 positions at cp 4); the
// acceptance's 100 steps at T = 256 (at most 1e-5 relative over the first 50
// steps, 1e-4 over all) is the same binary with PARALLM_CP_TRAIN_ITERS=100
// PARALLM_CP_TRAIN_T=256 (docs/context_parallel.md has the command).
#include <cstdlib>
#include <filesystem>
#include <string>

#include "parallel/dist_run.h"

using namespace parallm;
using test_util::world;

namespace {

int64_t env_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}
int64_t iters() {
  return env_or("PARALLM_CP_TRAIN_ITERS", 12);
}

class CpTrainTest : public test_util::DistRunTest {
 protected:
  train::RunConfig run(const std::string& out, int64_t batch, int64_t iters, std::vector<std::string> extra = {}) {
    auto c = tiny(out, batch);
    c.apply_overrides({"model.n_head=12", "model.n_embd=48", "model.vocab_size=65",
                       "model.block_size=" + std::to_string(env_or("PARALLM_CP_TRAIN_T", 64)), "optimizer.gas=1",
                       "train.eval_interval=50", "train.max_iters=" + std::to_string(iters),
                       "optimizer.lr_decay_iters=100"});
    c.apply_overrides(extra);
    return c;
  }
  // The one-rank reference, run by each rank alone in its own directory.
  train::RunSummary alone(const std::string& out, int64_t batch, int64_t iters) {
    return train::run_training(run(out + std::to_string(world->rank()), batch, iters));
  }
  // The acceptance bar: at most 1e-5 relative over the first 50 steps, 1e-4 over all.
  static void expect_matches(const train::RunSummary& got, const train::RunSummary& want, const std::string& what) {
    ASSERT_EQ(got.train_losses.size(), want.train_losses.size()) << what;
    const size_t n50 = std::min<size_t>(50, got.train_losses.size());
    const std::vector<float> g50(got.train_losses.begin(), got.train_losses.begin() + static_cast<long>(n50));
    const std::vector<float> w50(want.train_losses.begin(), want.train_losses.begin() + static_cast<long>(n50));
    const double d50 = max_rel_diff(g50, w50), d = max_rel_diff(got.train_losses, want.train_losses);
    if (world->rank() == 0)
      std::printf("%s: max relative train-loss difference %.3g over %zu steps, %.3g over %zu\n", what.c_str(), d50, n50,
                  d, got.train_losses.size());
    EXPECT_LE(d50, 1e-5) << what;
    EXPECT_LE(d, 1e-4) << what;
    EXPECT_NEAR(got.last_val_loss, want.last_val_loss, 1e-4 * want.last_val_loss) << what;
  }
};

std::string cp_of(int n) {
  return "parallel.cp=" + std::to_string(n);
}

}  // namespace

TEST_F(CpTrainTest, RingAndUlyssesMatchOneRank) {
  const int n = world->size();
  const int64_t n_it = iters();
  for (int64_t B : {1, 3}) {
    const auto one = alone("one_b" + std::to_string(B), B, n_it);
    for (const char* kind : {"ring", "ulysses"}) {
      const std::string what = std::string(kind) + " cp=" + std::to_string(n) + " B=" + std::to_string(B);
      auto r = train::run_training(
          run(std::string(kind) + std::to_string(B), B, n_it, {cp_of(n), std::string("parallel.cp_kind=") + kind}),
          world);
      expect_matches(r, one, what + " vs 1 rank");
    }
  }
}

TEST_F(CpTrainTest, ContextTimesTensorAndDataParallelMatchOneRank) {
  if (world->size() != 4) GTEST_SKIP() << "cp 2 x tp 2 and cp 2 x dp 2 need 4 ranks";
  const int64_t n_it = iters();
  for (int64_t B : {1, 3}) {
    const std::string b = " B=" + std::to_string(B);
    const auto one = alone("one_b" + std::to_string(B), B, n_it);
    for (const char* kind : {"ring", "ulysses"}) {
      auto r = train::run_training(run(std::string("tp_") + kind + std::to_string(B), B, n_it,
                                       {cp_of(2), "parallel.tp=2", std::string("parallel.cp_kind=") + kind}),
                                   world);
      expect_matches(r, one, std::string(kind) + " cp 2 x tp 2" + b + " vs 1 rank");
    }
    // dp 2: one rank with the global batch 2B.
    auto d = train::run_training(run("dp" + std::to_string(B), B, n_it, {cp_of(2)}), world);
    expect_matches(d, alone("one_2b" + std::to_string(B), 2 * B, n_it), "ring cp 2 x dp 2" + b + " vs 1 rank");
  }
}

TEST_F(CpTrainTest, PipelineTimesContextParallelMatchesOneRank) {
  if (world->size() != 4) GTEST_SKIP() << "pp 2 x cp 2 needs 4 ranks";
  auto r = train::run_training(run("pp", 2, 12, {cp_of(2), "parallel.pp=2", "optimizer.gas=2"}), world);
  auto one = train::run_training(run("pp_one" + std::to_string(world->rank()), 2, 12, {"optimizer.gas=2"}));
  expect_matches(r, one, "ring cp 2 x pp 2 vs 1 rank");
}

TEST_F(CpTrainTest, ZeroOverDataTimesContextMatchesOneRank) {
  const int n = world->size();
  const auto one = alone("zero_one", 2, 12);
  for (int stage : {1, 2, 3}) {
    auto r = train::run_training(run("zero" + std::to_string(stage), 2, 12,
                                     {cp_of(n), "zero.stage=" + std::to_string(stage), "parallel.cp_kind=ulysses"}),
                                 world);
    expect_matches(r, one, "ZeRO-" + std::to_string(stage) + " over cp=" + std::to_string(n) + " vs 1 rank");
  }
}

TEST_F(CpTrainTest, ACheckpointIsIndependentOfCp) {
  const int n = world->size();
  auto full = train::run_training(run("cp_full", 2, 12, {cp_of(n)}), world);
  auto part = run("cp_part", 2, 6, {cp_of(n)});
  train::run_training(part, world);
  world->barrier();
  // One rank resumes a copy of the cp checkpoint alone, with the whole sequence.
  const auto mine = root_ / ("cp_alone" + std::to_string(world->rank()));
  std::filesystem::create_directories(mine);
  std::filesystem::copy(root_ / "cp_part" / "ckpt-00000007", mine / "ckpt-00000007",
                        std::filesystem::copy_options::recursive);
  world->barrier();
  auto one = run("cp_alone" + std::to_string(world->rank()), 2, 12, {"train.init_from=resume"});
  auto resumed = train::run_training(one);
  ASSERT_EQ(resumed.first_iter, 7);
  const std::vector<float> tail(full.train_losses.begin() + 7, full.train_losses.end());
  ASSERT_EQ(resumed.train_losses.size(), tail.size());
  const double d = max_rel_diff(resumed.train_losses, tail);
  if (world->rank() == 0) std::printf("cp=%d checkpoint resumed by one rank: %.3g\n", n, d);
  EXPECT_LE(d, 1e-5);
  // Sampling under cp: every cp rank takes part, rank 0 prints.
  auto s = run("cp_sample", 1, 2, {cp_of(n), "train.sample_tokens=8"});
  EXPECT_NO_THROW(train::run_training(s, world));
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
