// The numeric detector (model/numeric_watch.h): the ring of the last 21
// frames and the report's text, and the model's checks: which tensors a pass
// hands over, the first non-finite one named (a weight made inf in one
// layer), and results unchanged with the watch on.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gpt.h"
#include "model/numeric_watch.h"

using namespace parallm;
using model::NumericWatch;

namespace {
std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const NumericError& e) {
    return e.what();
  }
  return "";
}
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST(NumericWatch, KeepsTheLast21FramesAndNamesTheFirstNonFinite) {
  NumericWatch w(Device::cpu(), 3, 4);
  const std::vector<float> ok = {0.5f, -2.0f, 0.0f, 1e-3f}, zeros(7, 0.0f);
  for (int l = 0; l < 10; ++l) {
    w.begin("h." + std::to_string(l), false, 8);
    w.add("weight", ok.data(), 4);
    w.add("output", l == 9 ? zeros.data() : ok.data(), l == 9 ? 7 : 4);
    w.end();
  }
  EXPECT_EQ(w.frames().size(), 20u);
  EXPECT_EQ(w.frames().front().layer, "h.0");
  const std::vector<float> bad = {1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f,
                                  -std::numeric_limits<float>::infinity(), 2.0f};
  const std::string msg = thrown([&] {
    w.begin("h.2", true, 9);  // iteration 2, micro-batch 1 with 4 micro-batches
    w.add("mlp.c_fc.weight grad", ok.data(), 4);
    w.add("d(input)", bad.data(), 5);
    w.add("never reached", ok.data(), 4);
    w.end();
  });
  ASSERT_FALSE(msg.empty());
  EXPECT_EQ(w.frames().size(), NumericWatch::kFrames);
  EXPECT_EQ(w.frames().front().layer, "h.0");  // 20 + 2 frames: the oldest one dropped
  EXPECT_EQ(w.frames().front().tensor, "output");
  EXPECT_EQ(w.frames().back().tensor, "d(input)");  // the failing tensor is the last frame
  EXPECT_EQ(w.frames().back().st.abs_max, 3.0f);
  EXPECT_NE(msg.find("[numeric] non-finite values first in layer h.2 tensor \"d(input)\" (1 inf, 1 nan of 5 values) "
                     "on rank 3, iteration 2, micro-batch 1, backward pass"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("The last 21 frames, oldest first"), std::string::npos) << msg;
  EXPECT_NE(msg.find("abs min   abs max      inf      nan  iter.micro   layer      tensor"), std::string::npos) << msg;
  // One line per frame: magnitudes, counts, where; "-" for no nonzero value; the failing one marked.
  EXPECT_NE(msg.find("   1.00e-03  2.00e+00        0        0  2.0 fwd      h.5        weight\n"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("          -  0.00e+00        0        0  2.0 fwd      h.9        output\n"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("   1.00e+00  3.00e+00        1        1  2.1 bwd      h.2        d(input)   <- non-finite\n"),
            std::string::npos)
      << msg;
  EXPECT_EQ(count(msg, "<- non-finite"), 1u);
  EXPECT_EQ(count(msg, " fwd ") + count(msg, " bwd "), NumericWatch::kFrames);
  EXPECT_EQ(msg.find("never reached"), std::string::npos);
}

namespace {
model::GPTConfig small() {
  model::GPTConfig c;
  c.n_layer = 3;
  c.n_embd = 32;
  c.n_head = 2;
  c.block_size = 16;
  c.vocab_size = 65;
  c.bias = true;
  c.dropout = 0.1f;
  return c;
}
struct Pass {
  float loss = 0;
  std::vector<float> grads;
};
Pass run(model::GPT& m, NumericWatch* w) {
  std::vector<int32_t> x(2 * 16), y(2 * 16);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>((i * 13) % 65);
    y[i] = static_cast<int32_t>((i * 7 + 1) % 65);
  }
  model::StepContext ctx;
  ctx.train = true;
  ctx.need_grad = true;
  ctx.seed = 5;
  ctx.micro_step = 3;
  ctx.watch = w;
  m.zero_grad();
  Pass p;
  p.loss = m.forward(x.data(), y.data(), 2, 16, ctx);
  m.backward(x.data(), 2, 16, ctx);
  p.grads.resize(static_cast<size_t>(m.flat_size()));
  m.store_grads(p.grads.data());
  return p;
}
}  // namespace

TEST(NumericWatch, ModelChecksEveryLayerWithoutChangingResults) {
  model::GPT m(small(), 2, 16);
  m.init_weights(7);
  const Pass off = run(m, nullptr);
  NumericWatch w(Device::cpu(), 0, 1);
  const Pass on = run(m, &w);
  EXPECT_EQ(on.loss, off.loss);
  EXPECT_EQ(on.grads, off.grads);  // bitwise
  // Forward: embed (wte, wpe, output), 3 blocks of 12 weights + 8 outputs, ln_f (2 + output), lm_head (losses,
  // d(ln_f output)); backward: ln_f (2 grads, d(input)), 3 blocks of 12 grads + d(input), embed (2 grads).
  EXPECT_EQ(w.tensors_checked(), 3 + 3 * 20 + 3 + 2 + 3 + 3 * 13 + 2);
  EXPECT_EQ(w.frames().back().layer, "embed");
  EXPECT_EQ(w.frames().back().tensor, "wte.weight grad");
  EXPECT_TRUE(w.frames().back().backward);
}

TEST(NumericWatch, ModelNamesTheLayerWhoseWeightOverflowed) {
  model::GPT m(small(), 2, 16);
  m.init_weights(7);
  m.param("transformer.h.1.attn.c_proj.weight").data<float>()[17] = std::numeric_limits<float>::infinity();
  NumericWatch w(Device::cpu(), 0, 1);
  const std::string msg = thrown([&] { run(m, &w); });
  EXPECT_NE(msg.find("non-finite values first in layer h.1 tensor \"attn.c_proj.weight\" (1 inf, 0 nan of 1024 "
                     "values) on rank 0, iteration 3, micro-batch 0, forward pass"),
            std::string::npos)
      << msg;
  EXPECT_EQ(w.frames().back().tensor, "attn.c_proj.weight");
  EXPECT_EQ(w.frames().front().layer, "h.0");  // the frames before it: h.0's, then h.1's first weights
}
