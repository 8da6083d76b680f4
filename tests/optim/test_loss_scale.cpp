// Dynamic loss scaling's rules: a non-finite norm skips the step and halves
// the scale, `window` finite steps in a row double it, the scale stays a
// power of two in [1, 2^64] (train.loss_scale's spellings: tests/train/test_config.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "optim/loss_scale.h"

using namespace parallm;
using optim::LossScaleMode;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(LossScale, ScalesArePowersOfTwoFromOneTo2To64) {
  EXPECT_TRUE(optim::is_loss_scale(1));
  EXPECT_TRUE(optim::is_loss_scale(std::ldexp(1.0, 64)));
  EXPECT_FALSE(optim::is_loss_scale(std::ldexp(1.0, 65)));
  EXPECT_FALSE(optim::is_loss_scale(3));
  EXPECT_FALSE(optim::is_loss_scale(std::nan("")));
}

TEST(LossScale, DynamicHalvesOnOverflowAndDoublesAfterTheWindow) {
  optim::LossScaler s({LossScaleMode::Dynamic, 1024, 3});
  EXPECT_TRUE(s.active());
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_TRUE(s.update(5.0, 0));
  EXPECT_TRUE(s.update(5.0, 1));
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_TRUE(s.update(5.0, 2));  // the third finite step in a row
  EXPECT_EQ(s.scale(), 2048.0f);
  EXPECT_TRUE(s.update(5.0, 3));
  EXPECT_FALSE(s.update(kInf, 4));  // overflow: skip, halve, the run of finite steps restarts
  EXPECT_FALSE(s.update(std::nan(""), 5));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.state().skipped, 2);
  EXPECT_EQ(s.state().good_steps, 0);
  EXPECT_TRUE(s.update(5.0, 6));
  EXPECT_TRUE(s.update(5.0, 7));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_TRUE(s.update(5.0, 8));
  EXPECT_EQ(s.scale(), 1024.0f);
}

TEST(LossScale, StopsAtTheEndsOfItsRange) {
  optim::LossScaler top({LossScaleMode::Dynamic, optim::LossScaler::kMaxScale, 1});
  EXPECT_TRUE(top.update(1.0, 0));
  EXPECT_EQ(top.state().scale, optim::LossScaler::kMaxScale);  // no growth past 2^64
  EXPECT_TRUE(std::isfinite(top.scale()));

  optim::LossScaler low({LossScaleMode::Dynamic, 2, 10});
  EXPECT_FALSE(low.update(kInf, 0));
  EXPECT_EQ(low.scale(), 1.0f);
  try {
    low.update(kInf, 1);
    FAIL() << "no error at scale 1";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("even at loss scale 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("iter 1"), std::string::npos) << e.what();
  }
}

TEST(LossScale, StaticAndOffTreatOverflowAsDivergence) {
  optim::LossScaler off({LossScaleMode::Off, 65536, 2000});
  EXPECT_FALSE(off.active());
  EXPECT_EQ(off.scale(), 1.0f);
  EXPECT_TRUE(off.update(3.0, 0));
  EXPECT_THROW(off.update(kInf, 1), NumericError);
  optim::LossScaler st({LossScaleMode::Static, 256, 1});
  EXPECT_TRUE(st.update(3.0, 0));
  EXPECT_EQ(st.scale(), 256.0f);  // never grows
  try {
    st.update(kInf, 4);
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("static loss scale 256"), std::string::npos) << e.what();
  }
}

TEST(LossScale, StateRoundTripsAndIsChecked) {
  optim::LossScaler a({LossScaleMode::Dynamic, 65536, 5});
  a.update(kInf, 0);
  a.update(1.0, 1);
  optim::LossScaler b({LossScaleMode::Dynamic, 65536, 5});
  b.set_state(a.state());
  EXPECT_EQ(b.state().scale, 32768);
  EXPECT_EQ(b.state().good_steps, 1);
  EXPECT_EQ(b.state().skipped, 1);
  EXPECT_THROW(b.set_state({3, 0, 0}), IoError);
  EXPECT_THROW(b.set_state({1024, -1, 0}), IoError);
}

}  // namespace
