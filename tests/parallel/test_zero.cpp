// ZeRO stages 1, 2 and 3, run through mpirun on 2, 3 and 4 ranks
// (tests/CMakeLists.txt), with dropout and gradient accumulation on: each
// stage (stage 3 with 0, 1 and 2 blocks prefetched) follows the DDP run and
// the one-rank run with the same global batch to fp32 rounding; a layout
// whose groups do not divide by the ranks shards without error and covers
// every element once; a stage-3 checkpoint (one shard file per rank) resumes
// at stage 1, on two ranks and on one rank, continuing the trajectory.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "comm/communicator.h"
#include "core/threads.h"
#include "kernels/bf16.h"
#include "model/gpt.h"
#include "model/params.h"
#include "optim/adamw.h"
#include "parallel/dist_run.h"
#include "parallel/zero.h"
#include "train/config/plan.h"
#include "train/loop/trainer.h"
#include "train/tiny_run.h"

using namespace parallm;

namespace {

using ZeroTest = test_util::DistRunTest;
using test_util::world;

// Slots of odd sizes: group lengths that do not divide by 3 or 4 ranks.
model::GPTConfig odd_gpt(int64_t block_size, bool bias) {
  model::GPTConfig c;
  c.n_layer = 3;
  c.n_head = 3;
  c.n_embd = 30;
  c.block_size = block_size;
  c.vocab_size = 53;
  c.bias = bias;
  return c;
}

TEST_F(ZeroTest, StagesFollowDdpAndOneRank) {
  const int n = world->size();
  // Four blocks: more than stage 3 keeps gathered at once, so forward and backward both gather.
  auto tiny = [&](const std::string& out, int64_t batch) {
    auto c = DistRunTest::tiny(out, batch);
    c.apply_overrides({"model.n_layer=4"});
    return c;
  };
  auto ddp = tiny("ddp", 2);
  ddp.train.max_iters = 12;
  const auto rd = train::run_training(ddp, world);
  auto one = tiny("one" + std::to_string(world->rank()), 2 * n);
  one.train.max_iters = 12;
  const auto r1 = train::run_training(one);
  struct Case {
    int stage, prefetch;
    const char* offload;
  };
  for (const Case& k :
       {Case{1, 1, "none"}, Case{2, 1, "none"}, Case{3, 1, "none"}, Case{3, 0, "none"}, Case{3, 2, "none"},
        Case{1, 1, "optimizer"}, Case{2, 1, "optimizer"}, Case{3, 1, "optimizer"}, Case{3, 1, "params"}}) {
    const int stage = k.stage, prefetch = k.prefetch;
    auto z = tiny("zero" + std::to_string(stage) + std::to_string(prefetch) + k.offload, 2);
    z.train.max_iters = 12;
    z.apply_overrides({"zero.stage=" + std::to_string(stage), "zero.prefetch=" + std::to_string(prefetch),
                       std::string("zero.offload=") + k.offload});
    const auto rz = train::run_training(z, world);
    ASSERT_EQ(rz.train_losses.size(), rd.train_losses.size());
    const double vs_ddp = max_rel_diff(rz.train_losses, rd.train_losses);
    const double vs_one = max_rel_diff(rz.train_losses, r1.train_losses);
    if (world->rank() == 0)
      std::printf(
          "zero.stage=%d (prefetch %d, offload %s) on %d ranks: max relative loss difference %.3g vs DDP, %.3g vs 1 "
          "rank x batch %d\n",
          stage, prefetch, k.offload, n, vs_ddp, vs_one, 2 * n);
    EXPECT_LT(vs_ddp, 2e-5) << "stage " << stage;
    EXPECT_LT(vs_one, 2e-5) << "stage " << stage;
    EXPECT_NEAR(rz.last_val_loss, rd.last_val_loss, 2e-5 * rd.last_val_loss);
    EXPECT_LT(rz.train_losses.back(), rz.train_losses.front());
  }
}

// An overflow in a sharded gradient reaches every rank through the global
// norm: each stage skips the same steps as one rank and keeps its scale.
TEST_F(ZeroTest, LossScalingSkipsTheSameStepsAtEveryStage) {
  const test_util::InfGradAt fault("1,4");
  const std::vector<std::string> scaled = {"train.loss_scale=dynamic", "train.loss_scale_window=2"};
  const int n = world->size();
  auto one = DistRunTest::tiny("ls_one" + std::to_string(world->rank()), 2 * n);
  one.train.max_iters = 8;
  one.apply_overrides(scaled);
  const auto r1 = train::run_training(one);
  EXPECT_EQ(r1.skipped_steps, 2);
  for (int stage : {1, 3}) {
    auto z = DistRunTest::tiny("ls_zero" + std::to_string(stage), 2);
    z.train.max_iters = 8;
    z.apply_overrides(scaled);
    z.apply_overrides({"zero.stage=" + std::to_string(stage)});
    const auto rz = train::run_training(z, world);
    EXPECT_EQ(rz.skipped_steps, 2) << "stage " << stage;
    EXPECT_EQ(rz.loss_scale, r1.loss_scale) << "stage " << stage;
    ASSERT_EQ(rz.train_losses.size(), r1.train_losses.size());
    EXPECT_LT(max_rel_diff(rz.train_losses, r1.train_losses), 2e-5) << "stage " << stage;
  }
}

// CPU bf16 mixed precision keeps fp32 buffers, so every stage shards them as
// in fp32 and follows bf16 DDP (a rounding apart in the gradient sums can
// round a weight's bf16 copy the other way, hence 1e-3, not fp32's 2e-5).
TEST_F(ZeroTest, CpuBf16StagesFollowBf16Ddp) {
  if (!kernels::bf16_products_supported()) GTEST_SKIP() << "no bf16 matrix hardware on this CPU";
  auto ddp = DistRunTest::tiny("bf16ddp", 2);
  ddp.train.max_iters = 8;
  ddp.apply_overrides({"train.dtype=bf16"});
  const auto rd = train::run_training(ddp, world);
  for (int stage : {2, 3}) {
    auto z = DistRunTest::tiny("bf16zero" + std::to_string(stage), 2);
    z.train.max_iters = 8;
    z.apply_overrides({"train.dtype=bf16", "zero.stage=" + std::to_string(stage)});
    const auto rz = train::run_training(z, world);
    ASSERT_EQ(rz.train_losses.size(), rd.train_losses.size());
    EXPECT_LT(max_rel_diff(rz.train_losses, rd.train_losses), 1e-3) << "stage " << stage;
    EXPECT_LT(rz.train_losses.back(), rz.train_losses.front());
  }
}

TEST_F(ZeroTest, StageThreeCheckpointResumesAtStageOneOnFewerRanks) {
  const int n = world->size(), me = world->rank();
  auto full = tiny("full", 2);
  full.train.max_iters = 12;
  full.apply_overrides({"zero.stage=3"});
  const auto rf = train::run_training(full, world);
  const std::vector<float> tail(rf.train_losses.begin() + 6, rf.train_losses.end());
  // Stage 3 on every rank saves at iter 6 (parameters and moments gathered from the shards) ...
  auto part = tiny("part", 2);
  part.train.max_iters = 6;
  part.apply_overrides({"zero.stage=3"});
  train::run_training(part, world);
  if (me == 0) test_util::keep_only_best_checkpoint(root_ / "part");  // the one saved at iter 6's evaluation
  if (me == 0)
    for (const char* copy : {"part_two", "part_one"})
      std::filesystem::copy(root_ / "part", root_ / copy, std::filesystem::copy_options::recursive);
  world->barrier();
  // ... stage 1 on the same ranks continues (moments scattered again) ...
  part.train.max_iters = 12;
  part.train.init_from = train::InitFrom::Resume;
  part.parallel.zero.stage = 1;
  const auto rp = train::run_training(part, world);
  ASSERT_EQ(rp.first_iter, 6);
  ASSERT_EQ(rp.train_losses.size(), 7u);
  const double d_stage1 = max_rel_diff(rp.train_losses, tail);
  EXPECT_LT(d_stage1, 2e-5);
  // ... so does stage 1 on two ranks (one on a world of one) with the same global batch ...
  auto two = world->split(me < 2 ? 0 : -1, me, "two");
  double d_two = 0;
  if (two) {
    auto c = tiny("part_two", 2 * n / std::min(n, 2));  // the same global batch on min(n, 2) ranks
    c.train.max_iters = 12;
    c.train.init_from = train::InitFrom::Resume;
    c.parallel.zero.stage = 1;
    const auto r2 = train::run_training(c, two.get());
    ASSERT_EQ(r2.first_iter, 6);
    d_two = max_rel_diff(r2.train_losses, tail);
    EXPECT_LT(d_two, 2e-5);
  }
  // ... and one process without ZeRO, with the whole global batch.
  if (me == 0) {
    // A shard file that went missing is an error naming it, not a silent partial load.
    std::filesystem::copy(root_ / "part_one", root_ / "part_broken", std::filesystem::copy_options::recursive);
    std::filesystem::remove(root_ / "part_broken" / "ckpt" / fmt::format("shard-00000-of-{:05d}.bin", n));
    auto broken = tiny("part_broken", 2 * n);
    broken.train.max_iters = 12;
    broken.train.init_from = train::InitFrom::Resume;
    try {
      train::run_training(broken);
      ADD_FAILURE() << "resumed from a checkpoint with a missing shard";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("shard-00000"), std::string::npos) << e.what();
    }
    auto one = tiny("part_one", 2 * n);
    one.train.max_iters = 12;
    one.train.init_from = train::InitFrom::Resume;
    one.apply_overrides({"zero.stage=0"});  // given, not left to the checkpoint's stage 3
    const auto r1 = train::run_training(one);
    ASSERT_EQ(r1.first_iter, 6);
    const double d = max_rel_diff(r1.train_losses, tail);
    std::printf(
        "stage-3 checkpoint of %d ranks resumed: stage 1 on %d ranks %.3g, stage 1 on 2 ranks %.3g, 1 rank %.3g max "
        "relative loss difference\n",
        n, n, d_stage1, d_two, d);
    EXPECT_LT(d, 2e-5);
  }
}

TEST(ZeroShards, UnevenGroupsAreCoveredOnceAndGatherBack) {
  const model::ParamLayout layout(odd_gpt(7, true));
  const int n = world->size(), me = world->rank(), root = n - 1;
  std::vector<float> params(layout.total()), grads(layout.total());
  // The flat buffer with each real element holding its own offset.
  std::vector<float> index(layout.total(), -1.0f);
  for (const auto& s : layout.slots())
    for (int64_t i = 0; i < s.numel; ++i) index[s.offset + i] = static_cast<float>(s.offset + i);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    // Stage 3 without prefetch: two block windows for three blocks, so windows are reused.
    parallel::Zero z(*world, layout, stage, stage < 3 ? params.data() : nullptr, stage == 1 ? grads.data() : nullptr,
                     0);
    // A shard-sized buffer holding each element's flat offset (from the full
    // buffer, split by the root), assembled back on the root.
    std::vector<float> local(z.shard_size(), -2.0f);
    z.scatter_shard(me == root ? index.data() : nullptr, local.data(), root);
    std::vector<float> full(me == root ? layout.total() : 0, -1.0f);
    z.gather_shard(local.data(), me == root ? full.data() : nullptr, root);
    if (me == root) {
      for (const auto& s : layout.slots())
        for (int64_t i = 0; i < s.numel; ++i) ASSERT_EQ(full[s.offset + i], index[s.offset + i]) << s.name;
    }
    // The optimizer's runs cover every real element exactly once over the ranks,
    // with their state inside the shard; at stages 1 and 2 they address the full buffer.
    std::vector<int32_t> owned(layout.total(), 0);
    for (const auto& r : z.runs()) {
      ASSERT_LE(r.state + r.length, z.shard_size());
      for (int64_t i = 0; i < r.length; ++i) {
        const auto flat = static_cast<int64_t>(local[r.state + i]);
        ASSERT_GE(flat, 0);
        owned[flat] += 1;
        if (stage < 3) {
          ASSERT_EQ(r.param + i, flat);
        }
      }
    }
    Tensor t = Tensor::view_of(owned.data(), {layout.total()}, DType::I32);
    world->all_reduce(t, comm::ReduceOp::Sum);
    for (const auto& s : layout.slots())
      for (int64_t i = 0; i < s.numel; ++i) ASSERT_EQ(owned[s.offset + i], 1) << s.name << "[" << i << "]";
    if (stage == 3) {  // every group gathers back whole, whatever the order asked
      for (int g = 0; g < layout.num_groups(); ++g) z.load_group(g, index.data() + layout.group(g).begin);
      for (int g : {2, 0, 3, 1, 2}) {
        const float* p = z.params(g, model::Pass::Backward);
        for (int64_t e = layout.group(g).begin; e < layout.group(g).end; ++e) {
          if (index[e] >= 0) {
            ASSERT_EQ(p[e - layout.group(g).begin], index[e]) << "group " << g;
          }
        }
        z.release_params(g, model::Pass::Backward);
      }
      z.gather_params();
    }
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

TEST(ZeroPlan, PredictsWhatRankZeroAllocates) {
  // The planner's bytes per category are what the model, ZeRO and the
  // optimizer allocate on rank 0 (which holds the largest shards).
  const model::GPTConfig c = odd_gpt(9, false);
  const int64_t B = 3;
  const int n = world->size();
  for (int stage : {0, 1, 2, 3}) {
    for (auto [prefetch, offload] : {std::pair{0, "none"}, {2, "none"}, {0, "optimizer"}, {0, "params"}}) {
      if ((stage < 3 && prefetch > 0) || (stage == 0 && std::string(offload) != "none") ||
          (stage < 3 && std::string(offload) == "params"))
        continue;
      const auto off = parallel::parse_offload(offload);
      auto& alloc = HostAllocator::instance();
      const MemStats before = alloc.stats();
      {
        model::GPT m(c, B, c.block_size, Device::cpu(), {stage < 3, stage < 2});
        std::unique_ptr<parallel::Zero> z;
        if (stage > 0)
          z = std::make_unique<parallel::Zero>(*world, m.layout(), stage, m.params(), m.grads(), prefetch, off);
        const int64_t state = z ? z->shard_size() : m.layout().total();
        optim::AdamW opt(std::vector<model::UpdateRun>{}, state, {}, Device::cpu(),
                         off == parallel::Offload::None ? MemCategory::OptState : MemCategory::Offloaded);
        const MemStats after = alloc.stats();
        train::PlanInput in;
        in.model = c;
        in.world = n;
        in.prefetch = prefetch;
        in.offload = off;
        in.micro_batch = B;
        in.seq_len = c.block_size;
        in.threads = num_threads();
        const auto want = train::plan_memory(in, stage);
        auto got = [&](MemCategory k) {
          const int i = static_cast<int>(k);
          return static_cast<double>(after.current[i] - before.current[i]);
        };
        if (world->rank() == 0) {
          SCOPED_TRACE(fmt::format("stage {} prefetch {} offload {} on {} ranks", stage, prefetch, offload, n));
          EXPECT_EQ(got(MemCategory::Params), want.params);
          EXPECT_EQ(got(MemCategory::Grads), want.grads);
          EXPECT_EQ(got(MemCategory::OptState), want.optimizer);
          EXPECT_EQ(got(MemCategory::Activations), want.activations);
          EXPECT_EQ(got(MemCategory::Comm), want.comm);
          EXPECT_EQ(got(MemCategory::Scratch), want.scratch);
          EXPECT_EQ(got(MemCategory::Offloaded), want.offloaded);
        }
      }
      world->barrier();
    }
  }
}

TEST(ZeroPlan, QuickRulesGiveTheSeedsNumbers) {
  EXPECT_DOUBLE_EQ(train::state_bytes_per_param("bf16", 0, 1), 18.0);
  EXPECT_DOUBLE_EQ(train::state_bytes_per_param("fp32", 0, 4), 16.0);
  EXPECT_DOUBLE_EQ(train::state_bytes_per_param("fp32", 1, 4), 10.0);
  EXPECT_DOUBLE_EQ(train::state_bytes_per_param("fp32", 2, 4), 7.0);
  EXPECT_DOUBLE_EQ(train::state_bytes_per_param("fp32", 3, 4), 4.0);
  EXPECT_EQ(train::gpus_needed(train::parse_count("80B", "params"), train::parse_bytes("80GB", "mem") / 1e9), 23);
  train::PlanInput in;
  in.params = train::parse_count("2B", "params");
  in.dtype = "bf16";
  EXPECT_DOUBLE_EQ(train::plan_memory(in, 0).total(), 36e9);  // 2B parameters need 36 GB
  EXPECT_EQ(train::stage_that_fits(in, 40e9), 0);
  in.world = 4;
  EXPECT_EQ(train::stage_that_fits(in, 20e9), 1);  // 2 + 4 + 12/4 = 9 B/param
  EXPECT_EQ(train::stage_that_fits(in, 10e9), 3);  // stage 2 needs 2 + 16/4 = 6 B/param = 12 GB
  EXPECT_THROW(train::parse_count("2X", "params"), ConfigError);
  EXPECT_THROW(train::parse_bytes("-1GB", "mem"), ConfigError);
}

}  // namespace

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
