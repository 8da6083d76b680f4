#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"

using namespace parallm;

TEST(Rng, ValueDependsOnlyOnSeedStreamIndex) {
  auto a = philox4x32(42, 7, 1000);
  philox4x32(42, 7, 5);  // unrelated call in between must not matter
  auto b = philox4x32(42, 7, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, philox4x32(43, 7, 1000));
  EXPECT_NE(a, philox4x32(42, 8, 1000));
  EXPECT_NE(a, philox4x32(42, 7, 1001));
}

TEST(Rng, NormalIsThreadCountIndependentAndWellDistributed) {
  const int64_t n = 200001;
  std::vector<float> x1(n), x2(n);
  set_num_threads(1);
  fill_normal(x1.data(), n, 0.0f, 2.0f, 1, stream_id(kRngTest, 3));
  set_num_threads(2);
  fill_normal(x2.data(), n, 0.0f, 2.0f, 1, stream_id(kRngTest, 3));
  EXPECT_EQ(x1, x2);
  double m = 0, v = 0;
  for (float f : x1) m += f;
  m /= n;
  for (float f : x1) v += (f - m) * (f - m);
  v /= n;
  EXPECT_NEAR(m, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(v), 2.0, 0.02);
  // A prefix of a longer fill equals a shorter fill: element i depends only on i.
  std::vector<float> x3(1001);
  fill_normal(x3.data(), 1001, 0.0f, 2.0f, 1, stream_id(kRngTest, 3));
  for (int i = 0; i < 1001; ++i) ASSERT_EQ(x3[i], x1[i]);
}

TEST(Rng, RandomBelowInRangeAndSpread) {
  std::vector<int> hist(7, 0);
  for (uint64_t i = 0; i < 70000; ++i) {
    uint64_t r = random_below(7, 9, 1, i);
    ASSERT_LT(r, 7u);
    hist[r]++;
  }
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
}

TEST(Rng, StreamIdsDiffer) {
  EXPECT_NE(stream_id(kRngDropout, 1, 2, 3), stream_id(kRngDropout, 1, 3, 2));
  EXPECT_NE(stream_id(kRngDropout, 0), stream_id(kRngInit, 0));
}
