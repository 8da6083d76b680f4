// train.skip_batches (train/loop/batch_skip.h) and the checkpoint keys: the
// iteration-to-batch map, and every bad value a ConfigError naming the key.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "train/checkpoint/ckpt_dirs.h"
#include "train/config/config.h"
#include "train/error_of.h"

using namespace parallm;

using parallm::test_util::error_of;

TEST(BatchSkip, IterationsReadTheBatchesLeftInOrder) {
  const auto none = train::BatchSkip::parse("k", "");
  for (int64_t it : {0, 1, 7, 1000}) EXPECT_EQ(none.data_index(it), it);
  const auto b = train::BatchSkip::parse("k", "3:4, 7 ,9:10");
  EXPECT_EQ(b.text(), "3:4,7:7,9:10");
  std::vector<int64_t> got;
  for (int64_t it = 0; it < 8; ++it) got.push_back(b.data_index(it));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2, 5, 6, 8, 11, 12}));
}

TEST(BatchSkip, BadRangesNameTheKeyAndTheRange) {
  train::RunConfig c;
  auto err = [&](const std::string& v) { return error_of([&] { c.set("train.skip_batches", v); }); };
  EXPECT_NE(err("1:x").find("train.skip_batches: \"1:x\" is not a range"), std::string::npos) << err("1:x");
  EXPECT_NE(err("-2:3").find("starts below batch 0"), std::string::npos);
  EXPECT_NE(err("5:3").find("the range 5:3 ends before it starts"), std::string::npos);
  EXPECT_NE(err("1:5,4:8").find("the range 4:8 overlaps the range 1:5"), std::string::npos);
  EXPECT_NE(err("10:12,1:2").find("the range 1:2 follows, but starts before, the range 10:12"), std::string::npos);
  EXPECT_NE(err("1:2,").find("ends with a comma"), std::string::npos);
  c.apply_overrides(
      {"train.max_iters=100", "train.skip_batches=50:60,120:130"});  // the last batch read: data_index(100) = 111
  EXPECT_NE(error_of([&] { c.validate(); }).find("train.skip_batches: the range 120:130 lies past the last batch"),
            std::string::npos);
  c.set("train.skip_batches", "50:60,105:130");  // data_index(100) = 111: reached
  EXPECT_EQ(error_of([&] { c.validate(); }), "");
}

TEST(CheckpointKeys, RangesAndResumeStepNeedsAResume) {
  train::RunConfig c;
  EXPECT_EQ(c.train.checkpoint_interval, 0);  // runs that set nothing save as before
  c.set("train.keep_checkpoints", "0");
  EXPECT_NE(error_of([&] { c.validate(); }).find("train.keep_checkpoints"), std::string::npos);
  c.set("train.keep_checkpoints", "3");
  c.set("train.resume_step", "40");
  EXPECT_NE(error_of([&] { c.validate(); }).find("train.resume_step=40 needs train.init_from=resume"),
            std::string::npos);
  c.set("train.init_from", "resume");
  EXPECT_EQ(error_of([&] { c.validate(); }), "");
}

TEST(CheckpointDirs, StepNamesAndPruning) {
  EXPECT_EQ(train::step_checkpoint("/r", 120).path(), "/r/ckpt-00000120");
  EXPECT_EQ(train::step_of("ckpt-00000120"), 120);
  EXPECT_EQ(train::step_of("ckpt-123456789"), 123456789);
  EXPECT_FALSE(train::step_of("ckpt-12"));
  EXPECT_FALSE(train::step_of("ckpt-0000012x"));
  EXPECT_FALSE(train::step_of("ckpt"));
  const auto root = std::filesystem::path(testing::TempDir()) / "ckpt_dirs_prune";
  std::filesystem::remove_all(root);
  for (const char* d :
       {"ckpt", "ckpt-00000002", "ckpt-00000004", "ckpt-00000006.old", "ckpt-00000008", "ckpt-00000008.tmp", "other"})
    std::filesystem::create_directories(root / d);
  EXPECT_EQ(train::checkpoint_names(root.string()),
            (std::vector<std::string>{"ckpt", "ckpt-00000002", "ckpt-00000004", "ckpt-00000006", "ckpt-00000008"}));
  train::prune_step_checkpoints(root.string(), 2);
  EXPECT_EQ(train::checkpoint_names(root.string()),
            (std::vector<std::string>{"ckpt", "ckpt-00000006", "ckpt-00000008"}));
  std::filesystem::remove_all(root);
}
