// ZeRO stages 1 and 2, run through mpirun on 2, 3 and 4 ranks
// (tests/CMakeLists.txt), with dropout and gradient accumulation on: each
// stage follows the DDP run and the one-rank run with the same global batch
// to fp32 rounding; a layout whose groups do not divide by the ranks shards
// without error and covers every element once; the norm and the sharded
// optimizer state survive a checkpoint that is resumed at another stage and
// on one rank.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "comm/communicator.h"
#include "model/params.h"
#include "parallel/dist_run.h"
#include "parallel/zero.h"
#include "train/tiny_run.h"
#include "train/trainer.h"

using namespace parallm;

namespace {

using ZeroTest = test_util::DistRunTest;
using test_util::world;

TEST_F(ZeroTest, StagesFollowDdpAndOneRank) {
  const int n = world->size();
  auto ddp = tiny("ddp", 2);
  ddp.max_iters = 12;
  const auto rd = train::run_training(ddp, world);
  auto one = tiny("one" + std::to_string(world->rank()), 2 * n);
  one.max_iters = 12;
  const auto r1 = train::run_training(one);
  for (int stage : {1, 2}) {
    auto z = tiny("zero" + std::to_string(stage), 2);
    z.max_iters = 12;
    z.apply_overrides({"zero.stage=" + std::to_string(stage)});
    const auto rz = train::run_training(z, world);
    ASSERT_EQ(rz.train_losses.size(), rd.train_losses.size());
    const double vs_ddp = max_rel_diff(rz.train_losses, rd.train_losses);
    const double vs_one = max_rel_diff(rz.train_losses, r1.train_losses);
    if (world->rank() == 0)
      std::printf("zero.stage=%d on %d ranks: max relative loss difference %.3g vs DDP, %.3g vs 1 rank x batch %d\n",
                  stage, n, vs_ddp, vs_one, 2 * n);
    EXPECT_LT(vs_ddp, 2e-5) << "stage " << stage;
    EXPECT_LT(vs_one, 2e-5) << "stage " << stage;
    EXPECT_NEAR(rz.last_val_loss, rd.last_val_loss, 2e-5 * rd.last_val_loss);
    EXPECT_LT(rz.train_losses.back(), rz.train_losses.front());
  }
}

TEST_F(ZeroTest, ResumeAtAnotherStageAndOnOneRank) {
  const int n = world->size();
  auto full = tiny("full", 2);
  full.max_iters = 12;
  full.apply_overrides({"zero.stage=2"});
  const auto rf = train::run_training(full, world);
  // Stage 2 saves at iter 6 (the moments gathered from the shards) ...
  auto part = tiny("part", 2);
  part.max_iters = 6;
  part.apply_overrides({"zero.stage=2"});
  train::run_training(part, world);
  if (world->rank() == 0)
    std::filesystem::copy(root_ / "part", root_ / "part_one", std::filesystem::copy_options::recursive);
  world->barrier();
  // ... stage 1 on the same ranks continues (the moments scattered again) ...
  part.max_iters = 12;
  part.init_from = "resume";
  part.zero_stage = 1;
  const auto rp = train::run_training(part, world);
  ASSERT_EQ(rp.first_iter, 6);
  ASSERT_EQ(rp.train_losses.size(), 7u);
  const std::vector<float> tail(rf.train_losses.begin() + 6, rf.train_losses.end());
  EXPECT_LT(max_rel_diff(rp.train_losses, tail), 2e-5);
  // ... and so does one process without ZeRO, with the whole global batch.
  if (world->rank() == 0) {
    auto one = tiny("part_one", 2 * n);
    one.max_iters = 12;
    one.init_from = "resume";
    const auto r1 = train::run_training(one);
    ASSERT_EQ(r1.first_iter, 6);
    const double d = max_rel_diff(r1.train_losses, tail);
    std::printf("stage-2 checkpoint of %d ranks: resumed at stage 1 %.3g, on 1 rank %.3g max relative difference\n", n,
                max_rel_diff(rp.train_losses, tail), d);
    EXPECT_LT(d, 2e-5);
  }
}

TEST(ZeroShards, UnevenGroupsAreCoveredOnceAndGatherBack) {
  model::GPTConfig c;
  c.n_layer = 3;
  c.n_head = 3;
  c.n_embd = 30;  // slots of odd sizes; group lengths that do not divide by 3 or 4 ranks
  c.block_size = 7;
  c.vocab_size = 53;
  c.bias = true;
  const model::ParamLayout layout(c);
  const int n = world->size(), me = world->rank();
  std::vector<float> params(layout.total()), grads(layout.total());
  for (int stage : {1, 2}) {
    parallel::Zero z(*world, layout, stage, params.data(), stage == 1 ? grads.data() : nullptr);
    // Every real parameter element is in exactly one rank's runs, and the state offsets tile the shard.
    std::vector<int32_t> owned(layout.total(), 0);
    int64_t state = 0;
    for (const auto& r : z.runs()) {
      EXPECT_GE(r.state, state);
      state = r.state + r.length;
      for (int64_t i = 0; i < r.length; ++i) owned[r.param + i] += 1;
    }
    EXPECT_LE(state, z.shard_size());
    Tensor t = Tensor::view_of(owned.data(), {layout.total()}, DType::I32);
    world->all_reduce(t, comm::ReduceOp::Sum);
    for (const auto& s : layout.slots())
      for (int64_t i = 0; i < s.numel; ++i) ASSERT_EQ(owned[s.offset + i], 1) << s.name << "[" << i << "]";
    // A shard-sized buffer assembled on the last rank and split back.
    std::vector<float> local(z.shard_size());
    for (const auto& r : z.runs())
      for (int64_t i = 0; i < r.length; ++i) local[r.state + i] = static_cast<float>(r.param + i);
    std::vector<float> full(me == n - 1 ? layout.total() : 0, -1.0f);
    z.gather_shard(local.data(), me == n - 1 ? full.data() : nullptr, n - 1);
    if (me == n - 1) {
      for (const auto& s : layout.slots())
        for (int64_t i = 0; i < s.numel; ++i) ASSERT_EQ(full[s.offset + i], static_cast<float>(s.offset + i));
    }
    std::vector<float> back(z.shard_size(), -1.0f);
    z.scatter_shard(me == n - 1 ? full.data() : nullptr, back.data(), n - 1);
    for (const auto& r : z.runs())
      for (int64_t i = 0; i < r.length; ++i) ASSERT_EQ(back[r.state + i], local[r.state + i]);
    // The global norm sees every rank's shard: each element of the mean gradient is 1.
    if (stage == 1) {
      std::fill(grads.begin(), grads.end(), 0.0f);
      for (const auto& s : layout.slots())
        std::fill(grads.begin() + s.offset, grads.begin() + s.offset + s.numel, 1.0f);
      z.begin_step();
      z.finish_grads();
      EXPECT_NEAR(z.grad_norm(), std::sqrt(static_cast<double>(layout.count())), 1e-9);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
