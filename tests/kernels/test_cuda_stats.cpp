// The numeric detector's statistics on the GPU (kernels::cuda::abs_stats)
// against the reference, exactly, fp32 and bf16, on the shared odd-size cases
// with inf and NaN; the result stays in device memory until copied back, and
// several results side by side do not disturb each other. Skipped, visibly,
// without a GPU.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "stats_cases.h"

namespace parallm {
namespace {

using kernels::AbsStats;
using test::Cuda;
using test::Dev;

void expect_same(const AbsStats& got, const AbsStats& want, size_t n) {
  EXPECT_EQ(got.abs_min, want.abs_min) << n;
  EXPECT_EQ(got.abs_max, want.abs_max) << n;
  EXPECT_EQ(got.inf, want.inf) << n;
  EXPECT_EQ(got.nan, want.nan) << n;
}

TEST_F(Cuda, AbsStatsMatchReferenceOnOddSizesWithInfAndNan) {
  const auto cases = test::stats_cases();
  Dev<AbsStats> out(std::vector<AbsStats>(2 * cases.size()));
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& x = cases[k].x;
    std::vector<bfloat16> h(x.size());
    for (size_t i = 0; i < h.size(); ++i) h[i].bits = f32_to_bf16(x[i]);
    Dev<float> dx(x);
    Dev<bfloat16> dh(h);
    kernels::cuda::abs_stats(out.p() + 2 * k, dx.p(), static_cast<int64_t>(x.size()));
    kernels::cuda::abs_stats(out.p() + 2 * k + 1, dh.p(), static_cast<int64_t>(x.size()));
    gpu::synchronize();  // the inputs are freed at the end of this scope
  }
  const std::vector<AbsStats> got = out.back();
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& x = cases[k].x;
    AbsStats want;
    kernels::ref::abs_stats(&want, x.data(), static_cast<int64_t>(x.size()));
    expect_same(got[2 * k], want, x.size());
    std::vector<bfloat16> h(x.size());
    for (size_t i = 0; i < h.size(); ++i) h[i].bits = f32_to_bf16(x[i]);
    kernels::ref::abs_stats(&want, h.data(), static_cast<int64_t>(h.size()));
    expect_same(got[2 * k + 1], want, x.size());
  }
}

}  // namespace
}  // namespace parallm
