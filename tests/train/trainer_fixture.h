// The trainer tests' fixture: a tiny dataset in a fresh temporary directory,
// the tiny run's config, and readers of a run's records.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/loop/trainer.h"
#include "train/tiny_run.h"

namespace parallm::test_util {

namespace fs = std::filesystem;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("parallm_trainer_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    test_util::prepare_tiny_dataset(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  train::RunConfig tiny(const std::string& out) {
    train::RunConfig c;
    c.apply_overrides(test_util::tiny_run_overrides(root_, out));
    return c;
  }
  // Trains run `out` from scratch to iteration `iters`.
  void train_to(const std::string& out, int64_t iters) {
    auto c = tiny(out);
    c.train.max_iters = iters;
    train::run_training(c);
  }
  // The config that resumes run `out` up to iteration `iters`.
  train::RunConfig resume_to(const std::string& out, int64_t iters) {
    auto c = tiny(out);
    c.train.init_from = train::InitFrom::Resume;
    c.train.max_iters = iters;
    return c;
  }
  // The records of run `out`'s metrics.jsonl whose "kind" is `kind` (every one but memory's when empty).
  std::vector<nlohmann::json> records(const std::string& out, const std::string& kind = "") {
    std::vector<nlohmann::json> r;
    std::ifstream f(root_ / out / "metrics.jsonl");
    for (std::string line; std::getline(f, line);) {
      auto j = nlohmann::json::parse(line);
      if (kind.empty() ? j["kind"] != "memory" : j["kind"] == kind) r.push_back(std::move(j));
    }
    return r;
  }
  // Trains run "part" to iteration 6 (its last state is saved after step 6,
  // in ckpt-00000007), resumes it to 12, and checks that the resumed steps
  // are bitwise those of the uninterrupted run `full`; *resumed gets the
  // resumed run's summary.
  void resume_at_6_matches(const std::vector<std::string>& overrides, const train::RunSummary& full,
                           train::RunSummary* resumed) {
    auto part = tiny("part");
    part.apply_overrides(overrides);
    part.train.max_iters = 6;
    train::run_training(part);
    auto again = tiny("part");
    again.apply_overrides(overrides);
    again.train.init_from = train::InitFrom::Resume;
    again.train.max_iters = 12;
    *resumed = train::run_training(again);
    ASSERT_EQ(resumed->first_iter, 7);
    ASSERT_EQ(resumed->train_losses.size(), 6u);
    for (size_t i = 0; i < resumed->train_losses.size(); ++i)
      EXPECT_EQ(resumed->train_losses[i], full.train_losses[7 + i]) << "iter " << 7 + i;
  }
  fs::path root_;
};

// The whole content of a file ("" if it cannot be read).
inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace parallm::test_util
