// All ranks must train with the same settings (train/agree.h), run through
// mpirun on 2 and 3 ranks (tests/CMakeLists.txt): equal configs pass, the
// per-rank keys may differ, and a key that differs on one rank is the same
// ConfigError on every rank, naming the key, the values and the ranks, before
// the run directory exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "parallel/dist_run.h"
#include "train/agree.h"
#include "train/trainer.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {

using AgreeTest = test_util::DistRunTest;
using test_util::world;

// "0.001 on ranks 0, 2" for every rank but 1, as agree.cpp lists them.
std::string others_text(const std::string& value) {
  const int n = world->size();
  std::string ranks;
  for (int r = 0; r < n; ++r)
    if (r != 1) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return value + (n == 2 ? " on rank " : " on ranks ") + ranks;
}

TEST(Agree, DescribesEachKeyWithItsValuesAndRanks) {
  const nlohmann::json a = {{"optimizer.learning_rate", 0.001}, {"train.seed", 1}, {"train.threads", 4}};
  nlohmann::json b = a;
  b["optimizer.learning_rate"] = 0.002;
  b["train.threads"] = 8;  // may differ
  EXPECT_EQ(train::describe_disagreement({a, a, a}), "");
  EXPECT_EQ(train::describe_disagreement({a, b, a, a, a, b}),
            "ranks disagree on optimizer.learning_rate: 0.001 on ranks 0, 2-4; 0.002 on ranks 1, 5 (every rank must "
            "be launched with the same settings)");
  b["train.seed"] = 2;
  EXPECT_EQ(train::describe_disagreement({a, b}),
            "ranks disagree on optimizer.learning_rate: 0.001 on rank 0; 0.002 on rank 1, and on train.seed: 1 on "
            "rank 0; 2 on rank 1 (every rank must be launched with the same settings)");
}

TEST_F(AgreeTest, EqualConfigsAndPerRankKeysPass) {
  auto c = tiny("out", 2);
  EXPECT_NO_THROW(train::check_ranks_agree(c, *world));
  c.threads = world->rank() + 1;
  c.progress = world->rank() == 0;
  c.comm_timeout_s = 30 + world->rank();
  EXPECT_NO_THROW(train::check_ranks_agree(c, *world));
}

TEST_F(AgreeTest, OneRankWithAnotherLearningRateFailsOnEveryRank) {
  if (world->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto c = tiny("out", 2);
  c.apply_overrides({"optimizer.learning_rate=0.001"});
  if (world->rank() == 1) c.apply_overrides({"optimizer.learning_rate=0.002"});
  try {
    train::check_ranks_agree(c, *world);
    FAIL() << "rank " << world->rank() << " accepted a learning rate that differs on rank 1";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "[config] ranks disagree on optimizer.learning_rate: " + others_text("0.001") +
                                         "; 0.002 on rank 1 (every rank must be launched with the same settings)");
  }
}

// Through the trainer: refused before anything is written.
TEST_F(AgreeTest, TrainingRefusesAnotherSeedOnOneRankBeforeTheRunDirectory) {
  if (world->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto c = tiny("seed_out", 2);
  c.max_iters = 2;
  if (world->rank() == 1) c.seed = 7;
  try {
    train::run_training(c, world);
    FAIL() << "rank " << world->rank() << " trained with a seed that differs on rank 1";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks disagree on train.seed: " + others_text("1337") + "; 7 on rank 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(c.out_dir)) << c.out_dir;
}

}  // namespace

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
