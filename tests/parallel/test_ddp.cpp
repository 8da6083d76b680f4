// Data parallelism, run through mpirun on 2 and 3 ranks (tests/CMakeLists.txt):
// N ranks with micro batch b train like one rank with micro batch N*b (same
// samples, same dropout masks, gradients averaged), with gradient
// accumulation and dropout on; resume under DDP continues the trajectory;
// buckets tile the gradient buffer in the order backward finishes it;
// with ddp.deterministic=true the N-rank run and one rank cutting its batch
// into N shards agree bit for bit; loss scaling skips the same steps on
// every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/params.h"
#include "parallel/ddp.h"
#include "parallel/deterministic.h"
#include "parallel/dist_run.h"
#include "train/loop/trainer.h"
#include "train/tiny_run.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {

using DdpTest = test_util::DistRunTest;
using test_util::world;

TEST_F(DdpTest, NRanksEqualOneRankWithTheWholeBatch) {
  const int n = world->size();
  auto dp = tiny("dp", 2);
  dp.train.max_iters = 12;
  auto r = train::run_training(dp, world);
  // The reference: one process, micro batch 2N, no communicator (each rank runs it alone).
  auto one = tiny("one" + std::to_string(world->rank()), 2 * n);
  one.train.max_iters = 12;
  auto r1 = train::run_training(one);
  ASSERT_EQ(r.train_losses.size(), r1.train_losses.size());
  const double d = max_rel_diff(r.train_losses, r1.train_losses);
  std::printf("%d ranks x batch 2 vs 1 rank x batch %d: max relative loss difference %.3g over %zu steps\n", n, 2 * n,
              d, r.train_losses.size());
  EXPECT_LT(d, 2e-5);
  EXPECT_NEAR(r.last_val_loss, r1.last_val_loss, 2e-5 * r1.last_val_loss);
  EXPECT_LT(r.train_losses.back(), r.train_losses.front());
}

TEST_F(DdpTest, DeterministicIsBitwiseEqualToOneRankWithShards) {
  const int n = world->size();
  auto dp = tiny("det", 2);
  dp.train.max_iters = 12;
  dp.apply_overrides({"ddp.deterministic=true"});
  auto r = train::run_training(dp, world);
  auto one = tiny("det_one" + std::to_string(world->rank()), 2 * n);
  one.train.max_iters = 12;
  one.apply_overrides({"ddp.deterministic=true", "ddp.shards=" + std::to_string(n)});
  auto r1 = train::run_training(one);
  ASSERT_EQ(r.train_losses.size(), r1.train_losses.size());
  for (size_t i = 0; i < r.train_losses.size(); ++i) EXPECT_EQ(r.train_losses[i], r1.train_losses[i]) << "iter " << i;
  EXPECT_EQ(r.last_val_loss, r1.last_val_loss);
  EXPECT_EQ(r.best_val_loss, r1.best_val_loss);
  // One rank cannot be told to cut its batch into a number of shards other than the ranks.
  auto bad = tiny("det_bad", 2);
  bad.apply_overrides({"ddp.deterministic=true", "ddp.shards=" + std::to_string(n + 1)});
  EXPECT_THROW(train::run_training(bad, world), ConfigError);
}

// One batch a reduction (optimizer.gas=1, train.eval_iters=1): the gathered
// shard losses' buffers were sized on first use only when their count differed
// from an empty tensor's numel (1), so with one batch they were never made and
// every rank crashed on its first evaluation (layout_fuzz seeds 77 and 86).
TEST_F(DdpTest, DeterministicWithOneBatchEqualsOneRankWithShards) {
  const int n = world->size();
  const std::vector<std::string> one_batch = {"ddp.deterministic=true", "optimizer.gas=1", "train.eval_iters=1",
                                              "train.max_iters=4"};
  auto dp = tiny("det1", 2);
  dp.apply_overrides(one_batch);
  auto r = train::run_training(dp, world);
  auto one = tiny("det1_one" + std::to_string(world->rank()), 2 * n);
  one.apply_overrides(one_batch);
  one.apply_overrides({"ddp.shards=" + std::to_string(n)});
  auto r1 = train::run_training(one);
  ASSERT_EQ(r.train_losses.size(), r1.train_losses.size());
  for (size_t i = 0; i < r.train_losses.size(); ++i) EXPECT_EQ(r.train_losses[i], r1.train_losses[i]) << "iter " << i;
  EXPECT_EQ(r.last_val_loss, r1.last_val_loss);
}

// Every rank sees the same global gradient norm, so with dynamic loss scaling
// every rank skips the same (overflowing) steps and keeps the same scale: the
// run stays one replica and follows one rank with the whole batch.
TEST_F(DdpTest, LossScalingSkipsTheSameStepsOnEveryRank) {
  const test_util::InfGradAt fault("1,4");
  const std::vector<std::string> scaled = {"train.loss_scale=dynamic", "train.loss_scale_window=2"};
  const int n = world->size();
  auto dp = tiny("ls", 2);
  dp.train.max_iters = 8;
  dp.apply_overrides(scaled);
  auto r = train::run_training(dp, world);
  auto one = tiny("ls_one" + std::to_string(world->rank()), 2 * n);
  one.train.max_iters = 8;
  one.apply_overrides(scaled);
  auto r1 = train::run_training(one);
  EXPECT_EQ(r.skipped_steps, 2);
  EXPECT_EQ(r1.skipped_steps, 2);
  EXPECT_EQ(r.loss_scale, r1.loss_scale);
  ASSERT_EQ(r.train_losses.size(), r1.train_losses.size());
  EXPECT_LT(max_rel_diff(r.train_losses, r1.train_losses), 2e-5);
}

TEST(OrderedSum, AddsLeftToRightInRankOrderOnEveryRank) {
  const int p = world->size();
  for (int64_t n : {0, 1, 7, 1001}) {
    // Values of very different magnitude, so the order of the additions shows in the result.
    auto value = [](int r, int64_t i) {
      const float mag[] = {1e8f, 1.0f, -1e8f, 3.0f, 0.5f};
      return mag[(r + i) % 5] * (1.0f + 0.001f * static_cast<float>(i % 13));
    };
    std::vector<float> x(n), expect(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = value(world->rank(), i);
      float s = value(0, i);
      for (int r = 1; r < p; ++r) s += value(r, i);
      expect[i] = s;
    }
    parallel::OrderedSum sum(*world, n);
    sum(x.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], expect[i]) << "element " << i << " of " << n;
  }
}

TEST_F(DdpTest, ResumeUnderDdpContinuesTheTrajectory) {
  auto full = tiny("full", 2);
  full.train.max_iters = 12;
  auto rf = train::run_training(full, world);
  auto part = tiny("part", 2);
  part.train.max_iters = 6;
  train::run_training(part, world);
  part.train.max_iters = 12;
  part.train.init_from = train::InitFrom::Resume;
  auto rp = train::run_training(part, world);  // from the state saved after iteration 6
  ASSERT_EQ(rp.first_iter, 7);
  ASSERT_EQ(rp.train_losses.size(), 6u);
  for (size_t i = 0; i < rp.train_losses.size(); ++i)
    EXPECT_EQ(rp.train_losses[i], rf.train_losses[7 + i]) << "iter " << 7 + i;
  EXPECT_EQ(rp.last_val_loss, rf.last_val_loss);
}

TEST(DdpBuckets, TileTheGradientBufferInBackwardOrder) {
  model::GPTConfig c;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 50;
  model::ParamLayout layout(c);
  std::vector<float> g(layout.total());
  for (double mb : {0.001, 0.01, 25.0}) {
    parallel::DataParallel ddp(*world, layout, g.data(), {mb});
    int64_t end = layout.total();
    for (int i = 0; i < ddp.num_buckets(); ++i) {
      EXPECT_EQ(ddp.bucket(i).end, end) << "bucket " << i << " at " << mb << " MiB";
      EXPECT_LT(ddp.bucket(i).begin, ddp.bucket(i).end);
      end = ddp.bucket(i).begin;
    }
    EXPECT_EQ(end, 0);
    if (mb == 25.0) {
      EXPECT_EQ(ddp.num_buckets(), 1);
    } else {
      EXPECT_GT(ddp.num_buckets(), 1);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
