// The loss-spike guard alone (train/controls/spike_guard.h): the z-score's arithmetic,
// the warm-up, one-sidedness, skipped values kept out of the window, the
// window sliding, the limit on skips in a row, the state's round trip through
// JSON (a restored guard decides as the original), and the keys' ranges.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/config/config.h"
#include "train/controls/spike_guard.h"

using namespace parallm;
using train::SpikeGuard;
using train::SpikeGuardConfig;
using train::SpikeGuardState;

namespace {

// Loss z-score 3 over a window of 4, grad norm off, 2 skips in a row allowed.
SpikeGuardConfig loss_guard() {
  SpikeGuardConfig c;
  c.loss_z = 3;
  c.window = 4;
  c.max_consecutive = 2;
  return c;
}

TEST(SpikeGuard, ZScoreIsOneSidedPopulationDeviations) {
  const std::vector<double> w = {1, 2, 3, 4, 5};  // mean 3, population sd sqrt(2)
  EXPECT_DOUBLE_EQ(train::zscore(w, 3 + 2 * std::sqrt(2.0)), 2.0);
  EXPECT_DOUBLE_EQ(train::zscore(w, 3 - std::sqrt(2.0)), -1.0);
  EXPECT_EQ(train::zscore({2, 2, 2}, 2.5), INFINITY);  // no spread: anything above the mean
  EXPECT_EQ(train::zscore({2, 2, 2}, 1.0), 0.0);
  EXPECT_EQ(train::zscore({}, 9.0), 0.0);
}

TEST(SpikeGuard, ActsOnlyOnceTheWindowIsFull) {
  SpikeGuard w(loss_guard());
  for (double v : {1.0, 1.1, 0.9}) {
    EXPECT_FALSE(w.warm());
    EXPECT_EQ(w.judge(0, v, 1), "");
  }
  EXPECT_EQ(w.judge(3, 50.0, 1), "") << "the 4th value fills the window: it is not judged";
  EXPECT_TRUE(w.warm());
  EXPECT_EQ(w.state().loss.size(), 4u);
}

TEST(SpikeGuard, SkipsASpikeWithTheReasonAndKeepsItOutOfTheWindow) {
  SpikeGuard g(loss_guard());
  for (double v : {1.0, 1.1, 0.9, 1.0}) g.judge(0, v, 1);
  const SpikeGuardState before = g.state();
  // mean 1, sd sqrt(0.005) = 0.0707: 1.5 lies 7.07 deviations above.
  EXPECT_EQ(g.judge(7, 1.5, 1), "loss z-score 7.07 > 3");
  EXPECT_EQ(g.state().loss, before.loss) << "a skipped value entered the window";
  EXPECT_EQ(g.state().consecutive, 1);
  EXPECT_EQ(g.state().skipped, 1);
  EXPECT_EQ(g.judge(8, 0.5, 1), "") << "a drop is not a spike";
  EXPECT_EQ(g.state().consecutive, 0);
  EXPECT_EQ(g.state().loss, (std::vector<double>{1.1, 0.9, 1.0, 0.5})) << "the window slides by one";
  EXPECT_EQ(g.state().skipped, 1);
}

TEST(SpikeGuard, GradNormAloneAndBothReasons) {
  SpikeGuardConfig c = loss_guard();
  c.loss_z = 0;
  c.grad_z = 2;
  SpikeGuard g(c);
  for (double v : {1.0, 2.0, 3.0, 2.0}) g.judge(0, v, v);  // mean 2, sd 0.707
  EXPECT_EQ(g.judge(1, 100.0, 2.0), "") << "the loss is not watched";
  // window {2, 3, 2, 2}: mean 2.25, sd 0.433
  EXPECT_EQ(g.judge(2, 1.0, 3.5), "grad norm z-score 2.89 > 2");
  c.loss_z = 2;
  SpikeGuard both(c);
  for (double v : {1.0, 2.0, 3.0, 2.0}) both.judge(0, v, v);
  EXPECT_EQ(both.judge(2, 4.0, 3.5), "loss z-score 2.83 > 2, grad norm z-score 2.12 > 2");
}

TEST(SpikeGuard, MoreSkipsInARowThanAllowedStopTheRun) {
  SpikeGuard g(loss_guard());
  for (double v : {1.0, 1.1, 0.9, 1.0}) g.judge(0, v, 1);
  EXPECT_NE(g.judge(10, 9.0, 1), "");
  EXPECT_NE(g.judge(11, 9.0, 1), "");
  try {
    g.judge(12, 9.0, 1);
    FAIL() << "a third skip in a row passed train.skip_max_consecutive=2";
  } catch (const NumericError& e) {
    const std::string m = e.what();
    for (const char* part : {"iter 12", "3 steps in a row", "train.skip_max_consecutive=2", "train.skip_loss_zscore=3",
                             "train.skip_grad_zscore=0", "train.skip_window=4", "loss z-score"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " missing in: " << m;
  }
  // An applied step in between resets the count.
  SpikeGuard h(loss_guard());
  for (double v : {1.0, 1.1, 0.9, 1.0}) h.judge(0, v, 1);
  for (int k = 0; k < 5; ++k) {
    EXPECT_NE(h.judge(2 * k, 9.0, 1), "");
    EXPECT_EQ(h.judge(2 * k + 1, 1.0, 1), "");
  }
  EXPECT_EQ(h.state().skipped, 5);
  // 0 allowed: the first skip stops the run.
  SpikeGuardConfig zero = loss_guard();
  zero.max_consecutive = 0;
  SpikeGuard z(zero);
  for (double v : {1.0, 1.1, 0.9, 1.0}) z.judge(0, v, 1);
  EXPECT_THROW(z.judge(5, 9.0, 1), NumericError);
}

TEST(SpikeGuard, StateRoundTripsBitwiseAndARestoredGuardDecidesAlike) {
  SpikeGuardConfig c = loss_guard();
  c.grad_z = 2.5;
  c.window = 6;
  SpikeGuard a(c);
  std::vector<std::pair<double, double>> seq;
  for (int i = 0; i < 40; ++i)  // values with long expansions, and spikes now and then
    seq.emplace_back(1.0 / (3.0 + i % 7) + (i % 9 == 8 ? 2.0 : 0.0), 0.1 * (i % 5) + 1.0 / 7.0);
  for (int i = 0; i < 20; ++i) a.judge(i, seq[i].first, seq[i].second);
  ASSERT_GT(a.state().skipped, 0);
  const std::string text = a.state().to_json().dump();
  const SpikeGuardState back = SpikeGuardState::from_json(nlohmann::json::parse(text));
  EXPECT_TRUE(back == a.state()) << text;
  SpikeGuard b(c, back);
  for (int i = 20; i < 40; ++i)
    EXPECT_EQ(b.judge(i, seq[i].first, seq[i].second), a.judge(i, seq[i].first, seq[i].second)) << i;
  EXPECT_TRUE(b.state() == a.state());
  // A shorter window on resume keeps the newest values.
  c.window = 3;
  SpikeGuard shorter(c, a.state());
  EXPECT_EQ(shorter.state().loss, std::vector<double>(a.state().loss.end() - 3, a.state().loss.end()));
  EXPECT_EQ(shorter.state().grad.size(), 3u);
}

TEST(SpikeGuard, MalformedStateIsAnIoError) {
  const SpikeGuardState s{{1.0, 2.0}, {3.0, 4.0}, 0, 1};
  nlohmann::json j = s.to_json();
  EXPECT_NO_THROW(SpikeGuardState::from_json(j));
  for (const auto& bad :
       {nlohmann::json::array(),
        nlohmann::json{{"loss", {1.0}}, {"grad_norm", {1.0, 2.0}}, {"consecutive", 0}, {"skipped", 0}}}) {
    EXPECT_THROW(SpikeGuardState::from_json(bad), IoError) << bad.dump();
  }
  j["skipped"] = -1;
  EXPECT_THROW(SpikeGuardState::from_json(j), IoError);
  j = s.to_json();
  j["loss"][0] = "x";
  EXPECT_THROW(SpikeGuardState::from_json(j), IoError);
}

TEST(SpikeGuard, BadKeysAreConfigErrorsNamingTheKey) {
  for (const std::string kv : {"train.skip_loss_zscore=-1", "train.skip_grad_zscore=-0.5", "train.skip_window=1",
                               "train.skip_window=0", "train.skip_max_consecutive=-1"}) {
    train::RunConfig c;
    c.model.vocab_size = 65;
    try {
      c.apply_overrides({kv});
      c.check_ranges();
      FAIL() << kv << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(kv.substr(0, kv.find('='))), std::string::npos) << e.what();
    }
  }
  train::RunConfig ok;
  ok.model.vocab_size = 65;
  ok.apply_overrides(
      {"train.skip_loss_zscore=5", "train.skip_grad_zscore=6", "train.skip_window=2", "train.skip_max_consecutive=0"});
  EXPECT_NO_THROW(ok.check_ranges());
  EXPECT_EQ(ok.to_json()["train.skip_window"], 2);
  EXPECT_FALSE(SpikeGuardConfig{}.enabled());  // off by default
  EXPECT_EQ(train::RunConfig{}.train.skip_loss_zscore, 0);
}

}  // namespace
