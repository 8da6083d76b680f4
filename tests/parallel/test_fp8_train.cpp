// FP8 on the CPU (train.dtype=fp8: the linear layers' operands scaled per row
// by powers of two and rounded to E4M3 / E5M2, products accumulated in fp32;
// kernels/cpu/fp8.h) in every two-rank layout against one rank: tp 2 (rows
// split over the group have their maxima reduced there), pp 2, cp 2 with the
// same batch, DDP and ZeRO 3 splitting it; the tiny GPT-2 with dropout 0.1 and
// a vocabulary of 65 the degrees do not divide, both blocks FP8
// (train.fp8_bf16_ends=false: the tiny model has two), 50 steps. A row's scale
// depends on that row alone, so no split of the tokens changes it; the
// layouts' fp32 rounding differences can still round an operand to the other
// FP8 neighbour (2^-3 of itself for E4M3), so the runs stay one rank's within
// the measured differences (printed, bars below), not within fp32's.
#include <algorithm>
#include <cmath>

#include "parallel/lowp_layouts.h"

using namespace parallm;
using test_util::world;

namespace {

// Measured (release build, 50 steps): the first 4 steps 0 to 9.1e-8 in every layout (a flip of one FP8 rounding
// is rare while the runs' fp32 differences are 1e-7 of a value: the rounding absorbs them), the first step above
// 1e-5 at 10-15, then 8.3e-4..1.37e-3 over 50 (each flip moves an operand by up to 2^-4 of itself for E4M3; the
// whole FP8 effect against fp32 is 2.45e-3). Bars: the early steps tightly (a scale that differs between layouts,
// or a wrong product, shows from step 0), the 50 steps at about twice the largest measured.
constexpr double kEarly = 1e-6, kAll = 3e-3;

class Fp8Test : public test_util::LowpLayoutTest {
 protected:
  explicit Fp8Test(std::vector<std::string> keys = {"train.dtype=fp8", "train.fp8_bf16_ends=false"},
                   std::string prefix = "fp8")
      : LowpLayoutTest(std::move(keys), std::move(prefix)) {}
  void expect_layouts(const train::RunSummary& one, int64_t batch, const Layouts& layouts) {
    for (const auto& [name, keys] : layouts) {
      const auto [r, d] = layout_diffs(one, batch, name, keys);
      ASSERT_EQ(r.train_losses.size(), one.train_losses.size()) << name;
      const double d20 = *std::max_element(d.begin(), d.begin() + 20), d50 = *std::max_element(d.begin(), d.end());
      const size_t apart =
          static_cast<size_t>(std::find_if(d.begin(), d.end(), [](double x) { return x > 1e-5; }) - d.begin());
      if (world->rank() == 0)
        std::printf(
            "fp8 %s vs 1 rank: relative train-loss difference %.3g at step 0, %.3g %.3g %.3g at 1-3, max %.3g over "
            "the first 20 steps, %.3g over 50; first above 1e-5 at step %zu\n",
            name.c_str(), d[0], d[1], d[2], d[3], d20, d50, apart);
      EXPECT_LT(*std::max_element(d.begin(), d.begin() + 4), kEarly) << name;
      EXPECT_LT(d50, kAll) << name;
    }
  }
};

// train.fp8_scaling=tensorwise: one scale per operand from its maximum over the stage's ranks.
class Fp8TensorwiseTest : public Fp8Test {
 protected:
  Fp8TensorwiseTest()
      : Fp8Test({"train.dtype=fp8", "train.fp8_bf16_ends=false", "train.fp8_scaling=tensorwise"}, "fp8tw") {}
};

}  // namespace

TEST_F(Fp8Test, EveryTwoRankLayoutEqualsOneRank) {
  if (world->size() != 2) GTEST_SKIP() << "the layouts are of 2 ranks";
  const auto one = alone("one", 2);
  const auto fp32 = alone("fp32", 2, {"train.dtype=fp32"});
  const auto ends = alone("ends", 2, {"train.fp8_bf16_ends=true"});  // two blocks, both bf16 by policy
  const double vs32 = max_rel_diff(one.train_losses, fp32.train_losses);
  const double ends32 = max_rel_diff(ends.train_losses, fp32.train_losses);
  if (world->rank() == 0)
    std::printf("fp8 one rank: differs from fp32 by %.3g; with both blocks bf16 (the policy's ends) by %.3g\n", vs32,
                ends32);
  EXPECT_GT(vs32, ends32) << "FP8 products should move the run further from fp32 than bf16 ones";
  EXPECT_GT(ends32, 0.0) << "bf16 products left the losses fp32's";
  EXPECT_LT(one.train_losses.back(), one.train_losses.front());
  expect_layouts(one, 2, {{"tp2", {"parallel.tp=2"}}, {"pp2", {"parallel.pp=2"}}, {"cp2", {"parallel.cp=2"}}});
  const auto one_b4 = alone("one_b4", 4);
  expect_layouts(one_b4, 2, {{"ddp", {}}, {"zero3", {"zero.stage=3"}}});
}

// Tensorwise scales are the same in every layout (a maximum is exact): the layouts follow one rank as rowwise ones
// do. Power-of-two scales change only what falls below the format's normals, so tensorwise and rowwise runs part
// slowly (printed).
TEST_F(Fp8TensorwiseTest, EveryTwoRankLayoutEqualsOneRank) {
  if (world->size() != 2) GTEST_SKIP() << "the layouts are of 2 ranks";
  const auto one = alone("one", 2);
  const auto rowwise = alone("rowwise", 2, {"train.fp8_scaling=rowwise"});
  if (world->rank() == 0)
    std::printf("fp8 one rank: tensorwise differs from rowwise by %.3g over 50 steps\n",
                max_rel_diff(one.train_losses, rowwise.train_losses));
  EXPECT_LT(one.train_losses.back(), one.train_losses.front());
  expect_layouts(one, 2, {{"tp2", {"parallel.tp=2"}}, {"pp2", {"parallel.pp=2"}}, {"cp2", {"parallel.cp=2"}}});
  const auto one_b4 = alone("one_b4", 4);
  expect_layouts(one_b4, 2, {{"ddp", {}}, {"zero3", {"zero.stage=3"}}});
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
