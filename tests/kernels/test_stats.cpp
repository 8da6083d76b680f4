// The numeric detector's statistics (kernels/stats.h): the CPU's parallel,
// vectorized version against the reference loop, exactly, on odd sizes with
// and without inf and NaN, for fp32 and bf16 inputs.
#include <gtest/gtest.h>

#include <limits>

#include "core/dtype.h"
#include "stats_cases.h"

using namespace parallm;
using namespace parallm::kernels;

namespace {
void expect_same(const AbsStats& got, const AbsStats& want, size_t n) {
  EXPECT_EQ(got.abs_min, want.abs_min) << n;
  EXPECT_EQ(got.abs_max, want.abs_max) << n;
  EXPECT_EQ(got.inf, want.inf) << n;
  EXPECT_EQ(got.nan, want.nan) << n;
}
}  // namespace

TEST(AbsStats, CpuMatchesReferenceOnOddSizesWithInfAndNan) {
  for (const auto& c : test::stats_cases()) {
    const auto n = static_cast<int64_t>(c.x.size());
    AbsStats want, got;
    ref::abs_stats(&want, c.x.data(), n);
    cpu::abs_stats(&got, c.x.data(), n);
    expect_same(got, want, c.x.size());
    EXPECT_EQ(want.inf, c.inf);
    EXPECT_EQ(want.nan, c.nan);
    EXPECT_EQ(got.finite(), c.inf == 0 && c.nan == 0);
    std::vector<bfloat16> h(c.x.size());
    for (size_t i = 0; i < h.size(); ++i) h[i].bits = f32_to_bf16(c.x[i]);
    ref::abs_stats(&want, h.data(), n);
    cpu::abs_stats(&got, h.data(), n);
    expect_same(got, want, c.x.size());
    EXPECT_EQ(want.nan, c.nan);
  }
}

TEST(AbsStats, ReferenceValuesByHand) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {0.0f, -3.0f, 1e-20f, 2.5f, -inf, 0.0f};
  AbsStats s;
  ref::abs_stats(&s, x.data(), 6);
  EXPECT_EQ(s.abs_min, 1e-20f);  // zeros are left out of the minimum
  EXPECT_EQ(s.abs_max, 3.0f);    // non-finite values out of the maximum
  EXPECT_EQ(s.inf, 1);
  EXPECT_EQ(s.nan, 0);
  cpu::abs_stats(&s, x.data(), 0);
  EXPECT_EQ(s.abs_min, inf);  // nothing nonzero: +inf, as documented
  EXPECT_EQ(s.abs_max, 0.0f);
  EXPECT_TRUE(s.finite());
}

// The bit-pattern edges of the CPU's integer comparisons: signed zeros, the
// largest finite value, subnormals, NaN with its sign bit set, nothing finite.
TEST(AbsStats, CpuEdgeValuesMatchTheReference) {
  using L = std::numeric_limits<float>;
  const std::vector<std::vector<float>> cases = {
      {-0.0f, 0.0f, L::max(), -L::denorm_min(), -L::quiet_NaN(), L::infinity()},
      {0.0f, -0.0f, 0.0f},
      {L::quiet_NaN(), -L::infinity(), -L::quiet_NaN()},
      {-L::max(), L::min(), L::denorm_min()},
  };
  for (const auto& x : cases) {
    AbsStats want, got;
    ref::abs_stats(&want, x.data(), static_cast<int64_t>(x.size()));
    cpu::abs_stats(&got, x.data(), static_cast<int64_t>(x.size()));
    expect_same(got, want, x.size());
  }
  AbsStats s;
  cpu::abs_stats(&s, cases[0].data(), 6);
  EXPECT_EQ(s.abs_min, L::denorm_min());
  EXPECT_EQ(s.abs_max, L::max());
  EXPECT_EQ(s.inf, 1);
  EXPECT_EQ(s.nan, 1);
  cpu::abs_stats(&s, cases[2].data(), 3);
  EXPECT_EQ(s.abs_min, L::infinity());
  EXPECT_EQ(s.abs_max, 0.0f);
}
