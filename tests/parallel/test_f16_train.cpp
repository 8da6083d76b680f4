// fp16 mixed precision on the CPU (train.dtype=fp16: every GEMM's operands
// rounded to binary16, products accumulated in fp32, dynamic loss scaling;
// kernels/cpu/f16.h) in every two-rank layout against one rank: tp 2, pp 2,
// cp 2 with the same batch, DDP and ZeRO 3 splitting it; the tiny GPT-2 with
// dropout 0.1 and a vocabulary of 65 the degrees do not divide, 50 steps. The
// layouts' fp32 rounding differences can round an operand to the other
// binary16 neighbour, so the runs stay one rank's within the measured
// differences (printed, bars below), not within fp32's.
#include <algorithm>
#include <cmath>

#include "parallel/lowp_layouts.h"

using namespace parallm;
using test_util::world;

namespace {

// Measured (release build): 6.7e-6..1.5e-5 over the first 20 steps, 1.1e-5..1.6e-5 over 50 (the whole fp16 effect
// against fp32 is 3.7e-5): from the first steps, one binary16 rounding flipped by the layouts' fp32 rounding moves
// an operand by 2^-11 of itself. Twice the largest measured, so a wrong product or a layout's own bug (1e-3 and
// up) fails.
constexpr double kFirst = 3e-5, kAll = 3e-5;

class F16Test : public test_util::LowpLayoutTest {
 protected:
  F16Test() : LowpLayoutTest({"train.dtype=fp16"}, "f16") {}
  void expect_layouts(const train::RunSummary& one, int64_t batch, const Layouts& layouts) {
    for (const auto& [name, keys] : layouts) {
      const auto [r, d] = layout_diffs(one, batch, name, keys);
      EXPECT_EQ(r.skipped_steps, one.skipped_steps) << name;
      EXPECT_EQ(r.loss_scale, one.loss_scale) << name;
      ASSERT_EQ(r.train_losses.size(), one.train_losses.size()) << name;
      const double d20 = *std::max_element(d.begin(), d.begin() + 20), d50 = *std::max_element(d.begin(), d.end());
      const size_t at = static_cast<size_t>(std::max_element(d.begin(), d.end()) - d.begin());
      if (world->rank() == 0)
        std::printf(
            "fp16 %s vs 1 rank: max relative train-loss difference %.3g over the first 20 steps, %.3g over 50 "
            "(step %zu)\n",
            name.c_str(), d20, d50, at);
      EXPECT_LT(d20, kFirst) << name;
      EXPECT_LT(d50, kAll) << name;
    }
  }
};

}  // namespace

TEST_F(F16Test, EveryTwoRankLayoutEqualsOneRank) {
  if (world->size() != 2) GTEST_SKIP() << "the layouts are of 2 ranks";
  const auto one = alone("one", 2);
  // The products are fp16's: the run is not fp32's, and dynamic loss scaling ran (from 2^16, halving on overflow).
  const auto fp32 = alone("fp32", 2, {"train.dtype=fp32"});
  EXPECT_GT(max_rel_diff(one.train_losses, fp32.train_losses), 0.0) << "fp16 products left the losses fp32's";
  if (world->rank() == 0)
    std::printf("fp16 one rank: %lld steps skipped for overflow, loss scale %g at the end; fp32 differs by %.3g\n",
                static_cast<long long>(one.skipped_steps), one.loss_scale,
                max_rel_diff(one.train_losses, fp32.train_losses));
  EXPECT_LT(one.train_losses.back(), one.train_losses.front());
  expect_layouts(one, 2, {{"tp2", {"parallel.tp=2"}}, {"pp2", {"parallel.pp=2"}}, {"cp2", {"parallel.cp=2"}}});
  const auto one_b4 = alone("one_b4", 4);
  expect_layouts(one_b4, 2, {{"ddp", {}}, {"zero3", {"zero.stage=3"}}});
}

// A loss scale too large for binary16 (2^30): the scaled gradients overflow the fp16 operands of the first
// backward passes, so dynamic scaling skips steps and halves the scale until they fit, on every rank alike, and
// each layout skips the one-rank run's steps and ends at its scale.
TEST_F(F16Test, OverflowSkipsTheSameStepsInEveryLayout) {
  if (world->size() != 2) GTEST_SKIP() << "the layouts are of 2 ranks";
  const std::vector<std::string> big = {"train.loss_scale_init=1073741824", "train.max_iters=29",
                                        "optimizer.lr_decay_iters=29"};
  const auto one = alone("big_one", 2, big);
  if (world->rank() == 0)
    std::printf("fp16 from scale 2^30: %lld of 30 steps skipped for overflow, scale %g at the end\n",
                static_cast<long long>(one.skipped_steps), one.loss_scale);
  EXPECT_GT(one.skipped_steps, 3);
  EXPECT_LE(one.loss_scale, 0x1p22);  // binary16's range bounds it (measured: overflow down to 2^22)
  EXPECT_LT(one.train_losses.back(), one.train_losses.front());
  for (const auto& [name, keys] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"tp2", {"parallel.tp=2"}}, {"pp2", {"parallel.pp=2"}}}) {
    std::vector<std::string> all = big;
    all.insert(all.end(), keys.begin(), keys.end());
    const auto r = train::run_training(run("big_" + name, 2, all), world);
    EXPECT_EQ(r.skipped_steps, one.skipped_steps) << name;
    EXPECT_EQ(r.loss_scale, one.loss_scale) << name;
    EXPECT_LT(max_rel_diff(r.train_losses, one.train_losses), kAll) << name;
  }
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
