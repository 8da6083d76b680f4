// Collective counts as a specification: the tensor-parallel group's operation
// counts (comm::OpCounts) after each pass of a small GPT, under mpirun with
// the whole world one tp group, against the formulas of docs/tensor_parallel.md
// ("Collectives of tensor parallelism per step"). A collective added, removed
// or resized in model/gpt.cpp fails here with both readings. n_layer 3,
// vocabulary 65 (no degree divides it), dropout 0.1 (masks move no data).
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt.h"
#include "parallel/dist_run.h"
#include "parallel/grad_sync.h"
#include "parallel/mesh.h"
#include "parallel/op_counts_print.h"
#include "parallel/tensor_parallel.h"

using namespace parallm;
using comm::OpCounts;
using comm::OpKind;
using test_util::world;

namespace {

// ---- the specification (docs/tensor_parallel.md, the table) ----
//
// All-reduces on the tp group of a model of L layers over a micro-batch of
// N = B x T tokens of width C, at tp > 1, without sequence parallelism.
// `e`: bytes per activation element (4 for fp32 and for CPU bf16, which keeps
// fp32 activations; 2 for bf16 on the GPU). The loss's maxima (N) and sums
// (2N) are fp32 always. At tp = 1 the model communicates nothing.
enum class Pass {
  Logits,    // forward without targets (generation, evaluation of logits)
  Loss,      // forward with targets, no gradient (evaluation)
  Forward,   // forward with targets and gradients (training)
  Backward,  // the backward after a training forward
  Step,      // a training micro-step: Forward + Backward
};

struct AllReduces {
  int64_t calls = 0, bytes = 0;
};

AllReduces tp_all_reduces(Pass pass, int64_t L, int64_t B, int64_t T, int64_t C, int tp, int64_t e = 4) {
  if (tp == 1) return {};
  const int64_t N = B * T, act = N * C * e;
  // Per layer: forward reduces the attention and the MLP projections' outputs
  // (row-parallel), backward reduces the input gradients of c_attn and c_fc
  // (column-parallel, the copy's backward).
  const AllReduces layer_fwd{2, 2 * act}, layer_bwd{2, 2 * act};
  const AllReduces embed{1, act};               // the vocabulary-parallel embedding's sum
  const AllReduces loss{2, N * 4 + 2 * N * 4};  // max over N rows, sums (exp and target logit) over 2N
  const AllReduces dlnf{1, act};                // d(ln_f output), the tied head's copy-backward
  auto add = [](AllReduces a, AllReduces b, int64_t times = 1) {
    return AllReduces{a.calls + times * b.calls, a.bytes + times * b.bytes};
  };
  const AllReduces logits = add(embed, layer_fwd, L);
  switch (pass) {
    case Pass::Logits:
      return logits;
    case Pass::Loss:
      return add(logits, loss);
    case Pass::Forward:
      return add(add(logits, loss), dlnf);
    case Pass::Backward:
      return add({}, layer_bwd, L);
    case Pass::Step:
      return add(add(add(logits, loss), dlnf), layer_bwd, L);
  }
  return {};
}

// The other collectives of a tp group: gathering the logits for sampling
// (rows x V, each rank's ceil(V / tp) vocabulary rows, padded ones included)
// and the gradient norm's sum over the group (one double per rank, as 2 int32).
int64_t sampling_gather_bytes(int64_t rows, int64_t V, int tp) {
  return tp == 1 ? 0 : tp * rows * ((V + tp - 1) / tp) * 4;
}
int64_t grad_norm_gather_bytes(int tp) {
  return tp == 1 ? 0 : 2 * tp * 4;
}

// With sequence parallelism (tp > 1): the residual stream is split by rows,
// so each all-reduce of N x C becomes a reduce-scatter (out of a row-parallel
// linear, the embedding, the head's input gradient) or an all-gather (into a
// column-parallel linear, the head's input), and backward gathers again the
// LayerNorm outputs its weight gradients need (not stored) and sums each
// LayerNorm's weight gradients (2C fp32) over the group. Payloads: N*C*e for
// every gather and scatter (the whole tensor).
struct SpCounts {
  int64_t gathers = 0, scatters = 0, reduces = 0, reduce_bytes = 0;
};
SpCounts sp_collectives(Pass pass, int64_t L, int64_t C) {
  switch (pass) {
    case Pass::Logits:
      return {2 * L, 2 * L + 1, 0, 0};
    case Pass::Loss:
      return {2 * L + 1, 2 * L + 1, 2, 0};
    case Pass::Forward:
      return {2 * L + 1, 2 * L + 2, 2, 0};
    case Pass::Backward:
      return {4 * L + 1, 2 * L, 2 * L + 1, (2 * L + 1) * 2 * C * 4};
    case Pass::Step:
      return {6 * L + 2, 4 * L + 2, 2 * L + 3, (2 * L + 1) * 2 * C * 4};
  }
  return {};
}
OpCounts sp_counts(Pass pass, int64_t L, int64_t B, int64_t T, int64_t C, int tp) {
  OpCounts c;
  if (tp == 1) return c;
  const int64_t N = B * T, act = N * C * 4;
  const SpCounts s = sp_collectives(pass, L, C);
  const int64_t loss_bytes = s.reduces >= 2 && pass != Pass::Backward ? N * 4 + 2 * N * 4 : 0;
  c.calls[static_cast<int>(OpKind::AllGather)] = s.gathers;
  c.bytes[static_cast<int>(OpKind::AllGather)] = s.gathers * act;
  c.calls[static_cast<int>(OpKind::ReduceScatter)] = s.scatters;
  c.bytes[static_cast<int>(OpKind::ReduceScatter)] = s.scatters * act;
  c.calls[static_cast<int>(OpKind::AllReduce)] = s.reduces;
  c.bytes[static_cast<int>(OpKind::AllReduce)] = s.reduce_bytes + loss_bytes;
  return c;
}

// ---- the model and the readings ----

constexpr int64_t kL = 3, kB = 3, kT = 16, kC = 48, kV = 65;

model::GPTConfig config(int64_t layers) {
  model::GPTConfig c;
  c.n_layer = layers;
  c.n_head = 12;  // divisible by 1, 2, 3, 4
  c.n_embd = kC;
  c.block_size = kT;
  c.vocab_size = kV;
  c.dropout = 0.1f;
  return c;
}

void batch(int64_t n, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  x.resize(n);
  y.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<int32_t>((i * 13 + 3) % kV);
    y[i] = static_cast<int32_t>((i * 7 + 1) % kV);
  }
}

model::StepContext training() {
  model::StepContext ctx;
  ctx.train = ctx.need_grad = true;
  ctx.seed = 7;
  return ctx;
}

OpCounts all_reduces(AllReduces a) {
  OpCounts c;
  c.calls[static_cast<int>(OpKind::AllReduce)] = a.calls;
  c.bytes[static_cast<int>(OpKind::AllReduce)] = a.bytes;
  return c;
}

OpCounts gathers(int64_t bytes) {
  OpCounts c;
  if (bytes == 0) return c;
  c.calls[static_cast<int>(OpKind::AllGather)] = 1;
  c.bytes[static_cast<int>(OpKind::AllGather)] = bytes;
  return c;
}

// What `f` issues on the group, against `want`, with both readings on failure.
template <class F>
void expect_counts(comm::Communicator& g, const OpCounts& want, const char* what, F&& f) {
  g.reset_counts();
  f();
  EXPECT_EQ(g.counts(), want) << what << " at tp=" << g.size();
}

// The world as one tp group, as the mesh makes it (the group spanning the world is the world itself).
struct TpModel {
  parallel::Mesh mesh;
  parallel::TensorParallelGroup tp;
  model::GPT m;
  explicit TpModel(int64_t layers, bool sp = false)
      : mesh(*world, parallel::MeshDims{.tp = world->size()}),
        tp(mesh.tp(), Device::cpu()),
        m(config(layers), kB, kT, Device::cpu(), {}, &tp, sp) {
    m.init_weights(1337);
  }
  comm::Communicator& group() { return mesh.tp(); }
};

}  // namespace

TEST(TensorParallelCounts, TrainingMicroStepMatchesTheFormulas) {
  TpModel t(kL);
  const int n = world->size();
  std::vector<int32_t> x, y;
  batch(kB * kT, x, y);
  t.m.zero_grad();
  const auto ctx = training();
  expect_counts(t.group(), all_reduces(tp_all_reduces(Pass::Forward, kL, kB, kT, kC, n)), "training forward",
                [&] { t.m.forward(x.data(), y.data(), kB, kT, ctx); });
  expect_counts(t.group(), all_reduces(tp_all_reduces(Pass::Backward, kL, kB, kT, kC, n)), "backward",
                [&] { t.m.backward(x.data(), kB, kT, ctx); });
  // The whole micro-step, a second time (accumulating): the same again.
  auto next = ctx;
  next.micro_step = 1;
  expect_counts(t.group(), all_reduces(tp_all_reduces(Pass::Step, kL, kB, kT, kC, n)), "training micro-step", [&] {
    t.m.forward(x.data(), y.data(), kB, kT, next);
    t.m.backward(x.data(), kB, kT, next);
  });
  if (n > 1) {  // the numbers themselves, for the table's worked example
    const auto s = tp_all_reduces(Pass::Step, kL, kB, kT, kC, n);
    EXPECT_EQ(s.calls, 4 * kL + 4);
    EXPECT_EQ(s.bytes, (4 * kL + 2) * kB * kT * kC * 4 + 12 * kB * kT);
  }
}

TEST(TensorParallelCounts, SequenceParallelMatchesTheFormulas) {
  TpModel t(kL, true);
  const int n = world->size();
  std::vector<int32_t> x, y;
  batch(kB * kT, x, y);
  t.m.zero_grad();
  const auto ctx = training();
  expect_counts(t.group(), sp_counts(Pass::Forward, kL, kB, kT, kC, n), "sp training forward",
                [&] { t.m.forward(x.data(), y.data(), kB, kT, ctx); });
  expect_counts(t.group(), sp_counts(Pass::Backward, kL, kB, kT, kC, n), "sp backward",
                [&] { t.m.backward(x.data(), kB, kT, ctx); });
  auto next = ctx;
  next.micro_step = 1;
  expect_counts(t.group(), sp_counts(Pass::Step, kL, kB, kT, kC, n), "sp training micro-step", [&] {
    t.m.forward(x.data(), y.data(), kB, kT, next);
    t.m.backward(x.data(), kB, kT, next);
  });
  model::StepContext eval;
  expect_counts(t.group(), sp_counts(Pass::Logits, kL, kB, kT, kC, n), "sp forward without targets",
                [&] { t.m.forward(x.data(), nullptr, kB, kT, eval); });
  expect_counts(t.group(), sp_counts(Pass::Loss, kL, kB, kT, kC, n), "sp forward with targets, no gradient",
                [&] { t.m.forward(x.data(), y.data(), kB, kT, eval); });
  if (n > 1) {  // the same bytes as without sp, moved as gathers and scatters (the loss and LayerNorm sums aside)
    const auto s = sp_counts(Pass::Forward, kL, kB, kT, kC, n);
    const auto a = tp_all_reduces(Pass::Forward, kL, kB, kT, kC, n);
    const int64_t act = kB * kT * kC * 4;
    EXPECT_EQ(s.bytes[static_cast<int>(OpKind::ReduceScatter)], a.bytes - 12 * kB * kT);
    EXPECT_EQ(s.bytes[static_cast<int>(OpKind::AllGather)], (2 * kL + 1) * act);
  }
}

TEST(TensorParallelCounts, EachLayerAddsTwoAllReducesEachWay) {
  // A model of 3 layers against one of 1: the difference is 2 layers' worth.
  const int n = world->size();
  std::vector<int32_t> x, y;
  batch(kB * kT, x, y);
  OpCounts per_model[2];
  const int64_t layers[2] = {1, kL};
  for (int i = 0; i < 2; ++i) {
    TpModel t(layers[i]);
    t.m.zero_grad();
    t.group().reset_counts();
    t.m.forward(x.data(), y.data(), kB, kT, training());
    t.m.backward(x.data(), kB, kT, training());
    per_model[i] = t.group().counts();
  }
  const OpCounts got = per_model[1] - per_model[0];
  const int64_t act = kB * kT * kC * 4;
  const OpCounts want = all_reduces(n == 1 ? AllReduces{} : AllReduces{(kL - 1) * 4, (kL - 1) * 4 * act});
  EXPECT_EQ(got, want) << "layers 2-3 at tp=" << n;
}

TEST(TensorParallelCounts, EvaluationForwardOnly) {
  TpModel t(kL);
  const int n = world->size();
  std::vector<int32_t> x, y;
  batch(kB * kT, x, y);
  model::StepContext eval;  // no dropout, no gradients
  expect_counts(t.group(), all_reduces(tp_all_reduces(Pass::Logits, kL, kB, kT, kC, n)), "forward without targets",
                [&] { t.m.forward(x.data(), nullptr, kB, kT, eval); });
  expect_counts(t.group(), all_reduces(tp_all_reduces(Pass::Loss, kL, kB, kT, kC, n)),
                "forward with targets, no gradient", [&] { t.m.forward(x.data(), y.data(), kB, kT, eval); });
  // A smaller batch than the model was made for: the messages follow B x T, not the allocation.
  expect_counts(t.group(), all_reduces(tp_all_reduces(Pass::Loss, kL, 2, 5, kC, n)), "evaluation of 2 x 5 tokens",
                [&] { t.m.forward(x.data(), y.data(), 2, 5, eval); });
  // Dropout on without gradients (a training forward whose gradients are not wanted) moves the same.
  auto no_grad = training();
  no_grad.need_grad = false;
  expect_counts(t.group(), all_reduces(tp_all_reduces(Pass::Loss, kL, kB, kT, kC, n)),
                "forward with dropout, no gradient", [&] { t.m.forward(x.data(), y.data(), kB, kT, no_grad); });
}

TEST(TensorParallelCounts, SamplingGathersTheVocabulary) {
  TpModel t(kL);
  const int n = world->size();
  std::vector<int32_t> x, y;
  batch(kB * kT, x, y);
  t.m.forward(x.data(), nullptr, kB, kT, {});
  std::vector<float> last(kB * kV), all(kB * kT * kV);
  expect_counts(t.group(), gathers(sampling_gather_bytes(kB, kV, n)), "last_logits",
                [&] { t.m.last_logits(last.data(), kB, kT); });
  expect_counts(t.group(), gathers(sampling_gather_bytes(kB * kT, kV, n)), "all_logits",
                [&] { t.m.all_logits(all.data(), kB, kT); });
}

TEST(TensorParallelCounts, GradientNormSumsOverTheGroupOnce) {
  // The optimizer step's one tp collective: the replicas' gradient norm (dp
  // here is a group of one rank, made on first use, which counts nothing).
  TpModel t(kL);
  const int n = world->size();
  std::vector<int32_t> x, y;
  batch(kB * kT, x, y);
  t.m.zero_grad();
  t.m.forward(x.data(), y.data(), kB, kT, training());
  t.m.backward(x.data(), kB, kT, training());
  auto sync = parallel::make_grad_sync(t.mesh.dp(), t.m, Device::cpu(), {}, &t.group());
  expect_counts(t.group(), gathers(grad_norm_gather_bytes(n)), "grad_norm", [&] { sync->grad_norm(true); });
  if (n > 1) {
    EXPECT_EQ(t.mesh.dp().counts(), OpCounts{});
  }
}

TEST(TensorParallelCounts, OneRankGroupsCountToo) {
  // tp = 1 on a world of several ranks: the mesh's tp group is a self
  // communicator made on first use. The model over it communicates nothing,
  // and what is issued on the group directly is counted.
  parallel::Mesh mesh(*world, parallel::MeshDims{.tp = 1});
  comm::Communicator& g = mesh.tp();
  ASSERT_EQ(g.size(), 1);
  parallel::TensorParallelGroup tp(g, Device::cpu());
  model::GPT m(config(kL), kB, kT, Device::cpu(), {}, &tp);
  m.init_weights(1337);
  std::vector<int32_t> x, y;
  batch(kB * kT, x, y);
  expect_counts(g, OpCounts{}, "one-rank micro-step", [&] {
    m.forward(x.data(), y.data(), kB, kT, training());
    m.backward(x.data(), kB, kT, training());
  });
  std::vector<float> v(5, 1.0f);
  expect_counts(g, all_reduces({2, 40}), "all_reduce on a one-rank group", [&] {
    tp.sum(v.data(), 5);
    tp.max(v.data(), 5);
  });
}

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
