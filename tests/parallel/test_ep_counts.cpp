// Expert parallelism's messages as a specification: the ep group's operation
// counts (comm::OpCounts) after each pass of a small MoE Llama, under mpirun
// with the whole world one ep group, against docs/moe.md ("Messages per MoE
// layer"). A message added, dropped or resized in model/moe_layer.cpp fails
// here with both readings. The rows each rank receives follow from the
// routing, which the test gathers from every rank (GPT::expert_choices), so
// the formula is exact on every rank. Then a router bias starves one rank's
// experts (and one more expert) of every token: the passes still finish, with
// empty messages where that rank receives nothing, and its experts' gradients
// are zero. 12 experts (divisible by every world size 1-4), top-2, layers 1
// and 2 of 3 MoE (layer 0 dense), dropout 0.1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt.h"
#include "parallel/dist_run.h"
#include "parallel/mesh.h"
#include "parallel/op_counts_print.h"
#include "parallel/tensor_parallel.h"

using namespace parallm;
using comm::OpCounts;
using comm::OpKind;
using test_util::world;

namespace {

constexpr int64_t kB = 2, kT = 12, kC = 32, kE = 12, kK = 2, kV = 65;

model::GPTConfig config() {
  model::GPTConfig c;
  c.arch = model::Arch::Llama;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = kC;
  c.block_size = kT;
  c.vocab_size = kV;
  c.intermediate_size = 48;
  c.dropout = 0.1f;
  c.moe.experts = kE;
  c.moe.top_k = kK;
  c.moe.intermediate = 16;
  c.moe.first = 1;
  c.moe.aux_coef = 0.01;
  c.moe.bias = true;
  return c;
}

// ---- the specification (docs/moe.md, "Messages per MoE layer") ----
//
// On an ep group of P ranks, per MoE layer, for a pass over N = B T tokens
// (each rank's), K choices each, C channels, e bytes per activation element:
//   forward:  1 all_to_all of the E per-expert counts (int32: 4 E bytes),
//             2 all_to_all_v: the rows out (N K C e: every choice, this rank's
//             own experts' included) and the experts' outputs back (R C e, R
//             the rows this rank's experts received from the whole group);
//   backward: 2 all_to_all_v: the outputs' gradients out, the inputs' back
//             (N K C e + R C e).
// A training forward also sums the routing counts over the data group, here
// the same communicator: 1 all_reduce of 2E + 2 floats. At P = 1 nothing is
// exchanged (and the data group's sum is skipped: one rank).
enum class Pass { Forward, Backward, Evaluation };

OpCounts ep_counts(Pass pass, int P, const std::vector<int64_t>& received, int64_t e = 4) {
  OpCounts c;
  if (P == 1) return c;
  const int64_t nkc = kB * kT * kK * kC * e;
  auto add = [&](OpKind k, int64_t calls, int64_t bytes) {
    c.calls[static_cast<int>(k)] += calls;
    c.bytes[static_cast<int>(k)] += bytes;
  };
  for (int64_t r : received) {  // one MoE layer each
    if (pass != Pass::Backward) add(OpKind::AllToAll, 1, 4 * kE);
    if (pass == Pass::Forward) add(OpKind::AllReduce, 1, (2 * kE + 2) * 4);
    add(OpKind::AllToAllV, 2, nkc + r * kC * e);
  }
  return c;
}

struct EpModel {
  parallel::Mesh mesh;
  parallel::TensorParallelGroup data, ep;
  model::GPT m;
  EpModel()
      : mesh(*world, parallel::MeshDims{.ep = world->size()}),
        data(mesh.dp_cp(), Device::cpu()),
        ep(mesh.ep(), Device::cpu()),
        m(config(), kB, kT, Device::cpu(), {}, nullptr, false, {}, {},
          model::ExpertPart{world->size() > 1 ? &data : nullptr, &ep}) {
    m.init_weights(1337);
  }
};

// The rows this rank's experts received in each MoE layer's last forward, from every rank's choices.
std::vector<int64_t> rows_received(model::GPT& m) {
  const int P = world->size();
  const int64_t El = kE / P, n = kB * kT * kK;
  std::vector<int64_t> out;
  for (int64_t l = 0; l < m.config().n_layer; ++l) {
    const std::vector<int32_t> mine = m.expert_choices(l);
    if (mine.empty()) continue;
    std::vector<int32_t> all(static_cast<size_t>(n * P));
    world->all_gather(Tensor::view_of(const_cast<int32_t*>(mine.data()), {n}, DType::I32),
                      Tensor::view_of(all.data(), {n * P}, DType::I32));
    out.push_back(std::count_if(all.begin(), all.end(), [&](int32_t x) { return x / El == world->rank(); }));
  }
  return out;
}

template <class F>
void expect_counts(comm::Communicator& g, const OpCounts& want, const std::string& what, F&& f) {
  g.reset_counts();
  f();
  EXPECT_EQ(g.counts(), want) << what << " at ep=" << g.size() << ", rank " << g.rank();
}

// A forward and backward over this rank's tokens, counted against the formulas.
void expect_passes(EpModel& t, const std::string& what) {
  const int P = world->size();
  std::vector<int32_t> x(kB * kT), y(kB * kT);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>((i * 13 + 3 + 5 * world->rank()) % kV);
    y[i] = static_cast<int32_t>((i * 7 + 1) % kV);
  }
  model::StepContext ctx;
  ctx.train = ctx.need_grad = true;
  ctx.seed = 7;
  ctx.sample_offset = world->rank() * kB;
  t.m.zero_grad();
  comm::Communicator& g = t.mesh.ep();
  g.reset_counts();
  t.m.forward(x.data(), y.data(), kB, kT, ctx);
  const OpCounts fwd = g.counts();
  const std::vector<int64_t> got = rows_received(t.m);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(fwd, ep_counts(Pass::Forward, P, got)) << what << " forward at ep=" << P << ", rank " << g.rank();
  expect_counts(g, ep_counts(Pass::Backward, P, got), what + " backward", [&] { t.m.backward(x.data(), kB, kT, ctx); });
  g.reset_counts();
  t.m.forward(x.data(), y.data(), kB, kT, model::StepContext{});  // evaluation: no gradients, no count sum
  const OpCounts eval = g.counts();
  EXPECT_EQ(eval, ep_counts(Pass::Evaluation, P, rows_received(t.m))) << what << " evaluation at ep=" << P;
}

}  // namespace

TEST(ExpertParallelCounts, TrainingPassesMatchTheFormulas) {
  EpModel t;
  expect_passes(t, "balanced");
}

TEST(ExpertParallelCounts, RankWithoutTokensTakesPartAndGetsZeroGradients) {
  EpModel t;
  const int P = world->size();
  const int64_t El = kE / P;
  // Rank 0's experts, and the first of rank 1's (or expert 1 alone), never chosen in either MoE layer.
  std::vector<float> bias(kE, 0.0f);
  for (int64_t x = 0; x < (P > 1 ? El + 1 : 1); ++x) bias[static_cast<size_t>(x)] = -1e4f;
  for (int64_t l : {1, 2}) {
    Tensor b = t.m.param("model.layers." + std::to_string(l) + ".mlp.gate.e_score_correction_bias");
    std::copy(bias.begin(), bias.end(), b.data<float>());
  }
  t.m.params_changed();
  expect_passes(t, "starved");
  const std::vector<int64_t> got = rows_received(t.m);
  if (P > 1 && world->rank() == 0) {
    EXPECT_EQ(got, (std::vector<int64_t>{0, 0})) << "rank 0's experts got tokens";
  }
  if (P == 1 || world->rank() == 0) {  // the starved experts' weights have no gradient
    const model::ParamLayout& lay = t.m.layout();
    for (int64_t l : {1, 2}) {
      const int64_t gate = lay.block(l).ex_gate;
      const int64_t n = (P > 1 ? El : 1) * 16 * kC;
      const float* gr = t.m.grads() + gate;
      EXPECT_TRUE(std::all_of(gr, gr + n, [](float v) { return v == 0.0f; })) << "layer " << l;
    }
  }
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
