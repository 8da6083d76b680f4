// The smoke-test MLP: gradients against central finite differences (in
// double, from the float model), every layout unit reported ready exactly
// once in backward order, and bad shapes rejected.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/mlp.h"

using namespace parallm;

TEST(MLP, GradientsMatchFiniteDifferences) {
  model::MLP m({5, 7, 6, 3}, 4);
  m.init_weights(7);
  // Non-zero biases, so their gradients are checked at a generic point too.
  for (const auto& s : m.layout().slots())
    if (s.init == model::ParamSlot::Init::Zeros) fill_normal(m.params() + s.offset, s.numel, 0, 0.3f, 9, 1);
  const int64_t B = 3;
  std::vector<float> x(B * 5), t(B * 3);
  fill_normal(x.data(), x.size(), 0, 1, 1, 2);
  fill_normal(t.data(), t.size(), 0, 1, 1, 3);
  m.zero_grad();
  m.forward(x.data(), t.data(), B);
  std::vector<int> ready;
  m.backward(x.data(), B, [&](int u) { ready.push_back(u); });
  const std::vector<int> order = {4, 5, 2, 3, 0, 1};
  EXPECT_EQ(ready, order);
  int checked = 0;
  for (const auto& s : m.layout().slots()) {
    for (int64_t i = 0; i < s.numel; i += 3) {
      float* p = m.params() + s.offset + i;
      const float keep = *p, h = 1e-2f;
      *p = keep + h;
      const double up = m.forward(x.data(), t.data(), B);
      *p = keep - h;
      const double down = m.forward(x.data(), t.data(), B);
      *p = keep;
      const double fd = (up - down) / (2.0 * h);
      const double g = m.grads()[s.offset + i];
      EXPECT_NEAR(g, fd, 2e-3 + 2e-2 * std::abs(fd)) << s.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

TEST(MLP, RejectsBadShapes) {
  EXPECT_THROW(model::MLP({5}, 4), ConfigError);
  EXPECT_THROW(model::MLP({5, 0, 3}, 4), ConfigError);
  model::MLP m({2, 2}, 4);
  std::vector<float> x(10, 0.f);
  EXPECT_THROW(m.forward(x.data(), x.data(), 5), ShapeError);
  EXPECT_EQ(m.num_params(), 6);
}
