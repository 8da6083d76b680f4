// All ranks must train with the same settings (train/config/agree.h), run through
// mpirun on 2 and 3 ranks (tests/CMakeLists.txt): equal configs pass, the
// per-rank keys may differ, and a key that differs on one rank is the same
// ConfigError on every rank, naming the key, the values and the ranks, before
// the run directory exists. Ranks agree on failures too: a damaged checkpoint
// file found by one rank, and a record rank 0 could not write, stop every rank
// with an error naming the file.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "parallel/dist_run.h"
#include "train/checkpoint/checkpoint.h"
#include "train/config/agree.h"
#include "train/loop/trainer.h"

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
  c.train.threads = world->rank() + 1;
  c.train.progress = world->rank() == 0;
  c.comm.timeout_s = 30 + world->rank();
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
  c.train.max_iters = 2;
  if (world->rank() == 1) c.train.seed = 7;
  try {
    train::run_training(c, world);
    FAIL() << "rank " << world->rank() << " trained with a seed that differs on rank 1";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks disagree on train.seed: " + others_text("1337") + "; 7 on rank 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(c.train.out_dir)) << c.train.out_dir;
}

TEST_F(AgreeTest, EveryRankRefusesADamagedCheckpointNamingTheFile) {
  auto c = tiny("dmg", 2);
  c.train.max_iters = 6;
  train::run_training(c, world);
  const fs::path optim = fs::path(c.train.out_dir) / "ckpt" / "optim.bin";
  if (world->rank() == 0) {  // one byte in the middle of the moments, with nothing to fall back on
    test_util::keep_only_best_checkpoint(c.train.out_dir);
    std::fstream f(optim, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(fs::file_size(optim) / 2);
    f.seekg(at);
    const char was = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(was ^ 0xff));
  }
  world->barrier();
  auto r = tiny("dmg", 2);
  r.train.init_from = train::InitFrom::Resume;
  r.train.max_iters = 8;
  try {
    train::run_training(r, world);
    FAIL() << "rank " << world->rank() << " resumed from a damaged checkpoint";
  } catch (const IoError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(optim.string() + " is damaged"), std::string::npos) << msg;
    // The files are shared out: optim.bin is the second, read by rank 1, whose reason every rank gives.
    if (world->size() > 1) {
      EXPECT_NE(msg.find("found by rank 1: its CRC-32 is "), std::string::npos) << msg;
      EXPECT_NE(msg.find(", state.json recorded "), std::string::npos) << msg;
    }
  }
}

TEST_F(AgreeTest, ARecordRankZeroCannotWriteStopsEveryRank) {
  auto c = tiny("rec", 2);
  c.apply_overrides({"train.max_iters=6", "train.eval_interval=1000"});
  train::run_training(c, world);
  const fs::path metrics = fs::path(c.train.out_dir) / "metrics.jsonl";
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  if (world->rank() == 0) {  // metrics.jsonl within a few records of a file size limit
    const auto limit = static_cast<rlim_t>(fs::file_size(fs::path(c.train.out_dir) / "ckpt" / "optim.bin") + 4096);
    std::ofstream pad(metrics, std::ios::app);
    const std::string line = "{\"kind\":\"pad\",\"step\":0,\"x\":\"" + std::string(200, 'x') + "\"}\n";
    for (auto size = fs::file_size(metrics); size + 1200 < limit; size += line.size()) pad << line;
    pad.close();
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = limit;
    ::setrlimit(RLIMIT_FSIZE, &small);
  }
  auto r = tiny("rec", 2);
  r.apply_overrides({"train.init_from=resume", "train.max_iters=40", "train.eval_interval=1000"});
  try {
    train::run_training(r, world);
    FAIL() << "rank " << world->rank() << " trained on without its records";
  } catch (const IoError& e) {
    const std::string msg = e.what();
    EXPECT_NE(
        msg.find(world->rank() == 0 ? "cannot write " + metrics.string() : "rank 0 could not write the run's records"),
        std::string::npos)
        << msg;
    EXPECT_NE(msg.find("the run stopped after iteration"), std::string::npos) << msg;
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  world->barrier();
  const auto s = train::run_training(r, world);  // with room again: on from the saved state
  EXPECT_GT(s.first_iter, 6);
  EXPECT_EQ(s.last_iter, 40);
  if (world->rank() == 0) {  // every step's record once
    std::vector<int64_t> steps;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["kind"] == "train") steps.push_back(j["step"].get<int64_t>());
    }
    std::vector<int64_t> want(41);
    for (int64_t i = 0; i <= 40; ++i) want[static_cast<size_t>(i)] = i;
    EXPECT_EQ(steps, want);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
