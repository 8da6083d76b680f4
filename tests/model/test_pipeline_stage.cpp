// Pipeline stages against the whole model, on one process: the model cut into
// stages and chunks (model::StageSpec), run micro-batch by micro-batch with
// the messages between stages copied by hand, gives the whole model's
// weights, losses and gradients, for any cut, with several micro-batches in
// flight (activation sets) and with the backward pass split into its input
// and weight halves (zero-bubble). The executor over MPI is tested in
// tests/parallel/test_pipeline_train.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "model/gpt.h"

using namespace parallm;
using model::LayerRange;

namespace {

model::GPTConfig config(model::Recompute recompute = model::Recompute::None) {
  model::GPTConfig c;
  c.recompute = recompute;
  c.n_layer = 4;
  c.n_embd = 24;
  c.n_head = 2;
  c.block_size = 8;
  c.vocab_size = 37;
  c.bias = true;
  c.dropout = 0.1f;
  return c;
}
constexpr int64_t kB = 2, kT = 8;
constexpr int kMicro = 3;
constexpr uint64_t kSeed = 7;

void batch(int micro, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  x.resize(kB * kT);
  y.resize(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    x[i] = (i * 13 + micro * 5) % 37;
    y[i] = (i * 7 + 1 + micro) % 37;
  }
}

model::StepContext ctx_for(int micro) {
  model::StepContext ctx;
  ctx.train = true;
  ctx.need_grad = true;
  ctx.seed = kSeed;
  ctx.micro_step = static_cast<uint64_t>(micro);
  ctx.loss_scale = 1.0f / kMicro;
  return ctx;
}

struct Whole {
  std::unique_ptr<model::GPT> m;
  std::vector<float> losses;
};

Whole run_whole() {
  Whole w;
  w.m = std::make_unique<model::GPT>(config(), kB, kT);  // no recompute: every mode gives the same bits
  w.m->init_weights(1);
  w.m->zero_grad();
  std::vector<int32_t> x, y;
  for (int mb = 0; mb < kMicro; ++mb) {
    batch(mb, x, y);
    const auto ctx = ctx_for(mb);
    w.losses.push_back(w.m->forward(x.data(), y.data(), kB, kT, ctx));
    w.m->backward(x.data(), kB, kT, ctx);
  }
  return w;
}

// ranks[r] = rank r's chunks; virtual stage c * p + r is rank r's chunk c.
void check_split(const std::vector<std::vector<LayerRange>>& ranks, bool split_backward,
                 model::Recompute recompute = model::Recompute::None) {
  const Whole whole = run_whole();
  const int p = static_cast<int>(ranks.size()), V = static_cast<int>(ranks[0].size());
  std::vector<std::unique_ptr<model::GPT>> st;
  for (const auto& chunks : ranks) {
    model::PipelinePart part;
    part.stage.chunks = chunks;
    part.in_flight.assign(chunks.size(), kMicro);
    part.split_backward = split_backward;
    st.push_back(
        std::make_unique<model::GPT>(config(), kB, kT, Device::cpu(), model::GPTStorage{}, nullptr, false, part));
    st.back()->init_weights(1);
    st.back()->zero_grad();
  }
  const size_t bytes = static_cast<size_t>(st[0]->message_count(kB, kT)) * sizeof(float);
  std::vector<int32_t> x, y;
  std::vector<float> losses;
  for (int mb = 0; mb < kMicro; ++mb) {  // GPipe's order: every forward, then every backward
    batch(mb, x, y);
    const auto ctx = ctx_for(mb);
    for (int vs = 0; vs < p * V; ++vs) {
      const int r = vs % p, c = vs / p;
      if (vs > 0) std::memcpy(st[r]->chunk_input(c, mb), st[(vs - 1) % p]->chunk_output((vs - 1) / p, mb), bytes);
      const float l = st[r]->forward_chunk(c, mb, x.data(), y.data(), kB, kT, ctx);
      if (vs == p * V - 1) losses.push_back(l);
    }
  }
  for (int mb = 0; mb < kMicro; ++mb) {
    batch(mb, x, y);
    const auto ctx = ctx_for(mb);
    for (int vs = p * V - 1; vs >= 0; --vs) {
      const int r = vs % p, c = vs / p;
      if (vs < p * V - 1) std::memcpy(st[r]->chunk_grad(c, mb), st[(vs + 1) % p]->chunk_grad((vs + 1) / p, mb), bytes);
      st[r]->backward_chunk(c, mb, x.data(), kB, kT, ctx,
                            split_backward ? model::BackwardPart::Input : model::BackwardPart::All);
    }
  }
  if (split_backward)  // every W after every B: the latest a schedule may run them
    for (int mb = 0; mb < kMicro; ++mb) {
      batch(mb, x, y);
      const auto ctx = ctx_for(mb);
      for (int vs = 0; vs < p * V; ++vs)
        st[vs % p]->backward_chunk(vs / p, mb, x.data(), kB, kT, ctx, model::BackwardPart::Weight);
    }
  for (int mb = 0; mb < kMicro; ++mb) EXPECT_EQ(losses[mb], whole.losses[mb]) << "micro-batch " << mb;
  // Every parameter where it lives: the same initial weights, and the whole
  // model's gradient (the tied table's: the first and last stages' summed).
  size_t seen = 0;
  for (const auto& s : whole.m->layout().slots()) {
    const Tensor wp = whole.m->param(s.name), wg = whole.m->grad(s.name);
    std::vector<float> sum(static_cast<size_t>(s.numel), 0.0f);
    int holders = 0;
    for (int r = 0; r < p; ++r) {
      const auto& lay = st[r]->layout();
      bool held = false;
      for (const auto& t : lay.slots()) held = held || t.name == s.name;
      if (!held) continue;
      ++holders;
      const Tensor sp = st[r]->param(s.name), sg = st[r]->grad(s.name);
      ASSERT_EQ(0, std::memcmp(sp.data<float>(), wp.data<float>(), s.numel * sizeof(float))) << s.name;
      for (int64_t i = 0; i < s.numel; ++i) sum[i] += sg.data<float>()[i];
    }
    ASSERT_EQ(holders, s.name == "transformer.wte.weight" ? 2 : 1) << s.name;
    ++seen;
    for (int64_t i = 0; i < s.numel; ++i) {
      const float want = wg.data<float>()[i];
      if (holders == 1)
        ASSERT_EQ(sum[i], want) << s.name << "[" << i << "]";
      else
        ASSERT_NEAR(sum[i], want, 1e-6f * (1.0f + std::fabs(want))) << s.name << "[" << i << "]";
    }
  }
  EXPECT_EQ(seen, whole.m->layout().slots().size());
}

}  // namespace

TEST(PipelineStage, TwoStagesGiveTheWholeModel) {
  check_split({{{0, 2}}, {{2, 4}}}, false);
}
TEST(PipelineStage, UnevenThreeStagesGiveTheWholeModel) {
  check_split({{{0, 1}}, {{1, 3}}, {{3, 4}}}, false);
}
TEST(PipelineStage, InterleavedChunksGiveTheWholeModel) {
  check_split({{{0, 1}, {2, 3}}, {{1, 2}, {3, 4}}}, false);
}
TEST(PipelineStage, SplitBackwardGivesTheSameGradients) {
  check_split({{{0, 1}}, {{1, 3}}, {{3, 4}}}, true);
  check_split({{{0, 1}, {2, 3}}, {{1, 2}, {3, 4}}}, true);
}

TEST(PipelineStage, RecomputeWithSetsInFlightGivesTheSameGradients) {
  // The shared recompute buffers hold the last forward's block, here another
  // micro-batch's: every block is redone before its backward.
  check_split({{{0, 2}}, {{2, 4}}}, false, model::Recompute::Full);
  check_split({{{0, 1}, {2, 3}}, {{1, 2}, {3, 4}}}, false, model::Recompute::Selective);
}

TEST(PipelineStage, LayoutHoldsOnlyTheStagesParameters) {
  const auto c = config();
  const model::ParamLayout first(c, {}, {{{0, 1}}}), middle(c, {}, {{{1, 3}}}), last(c, {}, {{{3, 4}}});
  EXPECT_TRUE(first.first_stage() && !first.last_stage() && first.wpe() >= 0 && first.lnf_w() < 0);
  EXPECT_TRUE(!middle.first_stage() && !middle.last_stage() && middle.wte() < 0 && middle.embed_group() < 0);
  EXPECT_TRUE(last.last_stage() && last.wte() >= 0 && last.wpe() < 0 && last.slots()[0].tied_copy);
  EXPECT_FALSE(first.slots()[0].tied_copy);
  EXPECT_TRUE(middle.holds_block(1) && middle.holds_block(2) && !middle.holds_block(0) && !middle.holds_block(3));
  const model::ParamLayout whole(c);
  EXPECT_EQ(middle.slots()[0].name, "transformer.h.1.ln_1.weight");
  EXPECT_EQ(whole.slots()[middle.slots()[0].global_index].name, middle.slots()[0].name);
  EXPECT_EQ(whole.slots()[last.slots().back().global_index].name, "transformer.ln_f.bias");
}

TEST(PipelineStage, BadChunksAreRefusedInWords) {
  const auto c = config();
  for (const auto& chunks :
       std::vector<std::vector<LayerRange>>{{{0, 0}}, {{0, 5}}, {{2, 3}, {1, 2}}, {{0, 2}, {1, 3}}})
    EXPECT_THROW(model::ParamLayout(c, {}, {chunks}), ConfigError);
}
