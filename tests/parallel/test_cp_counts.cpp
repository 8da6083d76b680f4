// Collective counts as a specification: the context-parallel group's
// operation counts (comm::OpCounts) after each pass of a small GPT, under
// mpirun with the whole world one cp group, against the formulas of
// docs/context_parallel.md ("Messages per layer"). A message added, dropped
// or resized in model/cp_attention.cpp fails here with both readings.
// n_layer 2, T 24 (divisible by 2 x cp for cp = 1..4), 12 heads, dropout 0.1.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <ostream>
#include <vector>

#include "comm/communicator.h"
#include "core/allocator.h"
#include "model/gpt.h"
#include "parallel/context_parallel.h"
#include "parallel/dist_run.h"
#include "parallel/mesh.h"
#include "parallel/op_counts_print.h"

using namespace parallm;
using comm::OpCounts;
using comm::OpKind;
using model::CpKind;
using test_util::world;

namespace {

// ---- the specification (docs/context_parallel.md) ----
//
// On the cp group of C ranks, per layer, for a pass over B x Tl local
// positions with Cl = n_embd / tp attention columns, e bytes per activation
// element (the ring's dK|dV accumulator is fp32: 4):
//   ring forward:     C-1 sends and C-1 receives of B Tl 2Cl e bytes each
//   ring backward:    C-1 of those (K|V again) + C of B Tl 2Cl 4 bytes (dK|dV)
//   ulysses forward:  2 all-to-alls: B Tl 3Cl e (q|k|v) + B Tl Cl e (the output)
//   ulysses backward: 2 all-to-alls: B Tl Cl e (d output) + B Tl 3Cl e (dq|dk|dv)
// model.recompute=full redoes the forward of every layer but the last (whose
// buffers the forward just left) inside backward. At C = 1 the model
// communicates nothing.
enum class Pass { Forward, Backward };

OpCounts cp_counts(CpKind kind, Pass pass, int64_t L, int64_t B, int64_t Tl, int64_t Cl, int C, bool recompute,
                   int64_t e = 4) {
  OpCounts c;
  if (C == 1) return c;
  const int64_t kv = B * Tl * 2 * Cl;
  auto add = [&](OpKind k, int64_t layers, int64_t calls, int64_t bytes) {
    c.calls[static_cast<int>(k)] += layers * calls;
    c.bytes[static_cast<int>(k)] += layers * bytes;
  };
  // Layers whose forward messages this pass sends, and whose backward ones.
  const bool bwd = pass == Pass::Backward;
  const int64_t fwd_layers = !bwd ? L : recompute ? L - 1 : 0, bwd_layers = bwd ? L : 0;
  if (kind == CpKind::Ring) {
    for (OpKind k : {OpKind::Send, OpKind::Recv}) {
      add(k, fwd_layers, C - 1, (C - 1) * kv * e);
      add(k, bwd_layers, (C - 1) + C, (C - 1) * kv * e + C * kv * 4);
    }
    return c;
  }
  add(OpKind::AllToAll, fwd_layers, 2, 4 * B * Tl * Cl * e);
  add(OpKind::AllToAll, bwd_layers, 2, 4 * B * Tl * Cl * e);
  return c;
}

constexpr int64_t kB = 3, kT = 24, kC = 48, kV = 65;

model::GPTConfig config(int64_t layers, bool recompute) {
  model::GPTConfig c;
  c.n_layer = layers;
  c.n_head = 12;
  c.n_embd = kC;
  c.block_size = kT;
  c.vocab_size = kV;
  c.dropout = 0.1f;
  if (recompute) c.recompute = model::Recompute::Full;
  return c;
}

template <class F>
void expect_counts(comm::Communicator& g, const OpCounts& want, const std::string& what, F&& f) {
  g.reset_counts();
  f();
  EXPECT_EQ(g.counts(), want) << what << " at cp=" << g.size();
}

struct CpModel {
  parallel::Mesh mesh;
  parallel::ContextParallelGroup cp;
  model::GPT m;
  CpModel(CpKind kind, int64_t layers, bool recompute)
      : mesh(*world, parallel::MeshDims{.cp = world->size()}),
        cp(mesh.cp(), Device::cpu()),
        m(config(layers, recompute), kB, kT / world->size(), Device::cpu(), {}, nullptr, false, {},
          model::ContextPart{&cp, kind}) {
    m.init_weights(1337);
  }
};

}  // namespace

TEST(ContextParallelCounts, TrainingPassesMatchTheFormulas) {
  const int n = world->size();
  const int64_t Tl = kT / n, L = 2;
  std::vector<int32_t> x(kB * Tl), y(kB * Tl);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>((i * 13 + 3 + world->rank()) % kV);
    y[i] = static_cast<int32_t>((i * 7 + 1) % kV);
  }
  for (CpKind kind : {CpKind::Ring, CpKind::Ulysses})
    for (bool recompute : {false, true}) {
      CpModel t(kind, L, recompute);
      const std::string what = std::string(model::cp_kind_name(kind)) + (recompute ? " recompute=full" : "");
      model::StepContext ctx;
      ctx.train = ctx.need_grad = true;
      ctx.seed = 7;
      t.m.zero_grad();
      expect_counts(t.mesh.cp(), cp_counts(kind, Pass::Forward, L, kB, Tl, kC, n, recompute), what + " forward",
                    [&] { t.m.forward(x.data(), y.data(), kB, Tl, ctx); });
      expect_counts(t.mesh.cp(), cp_counts(kind, Pass::Backward, L, kB, Tl, kC, n, recompute), what + " backward",
                    [&] { t.m.backward(x.data(), kB, Tl, ctx); });
      // Evaluation (no gradients): the forward's messages alone, also for a smaller batch than allocated.
      expect_counts(t.mesh.cp(), cp_counts(kind, Pass::Forward, L, 1, Tl, kC, n, false), what + " evaluation, B=1",
                    [&] { t.m.forward(x.data(), y.data(), 1, Tl, model::StepContext{}); });
    }
  if (n == 4) {  // the numbers themselves, for the docs' worked example (B 3, Tl 6, C 48, 2 layers)
    const OpCounts r = cp_counts(CpKind::Ring, Pass::Backward, 2, 3, 6, 48, 4, false);
    EXPECT_EQ(r.calls_of(OpKind::Send), 14);
    EXPECT_EQ(r.bytes_of(OpKind::Send), 2 * 7 * 3 * 6 * 96 * 4);
  }
}

// Activation memory per rank (the host allocator's Activations category) at
// T = 1024: cp = 4 against one rank with the whole sequence, both kinds; and
// the longest T whose activations fit the one-rank model's at 1024, from
// GPT::buffers (the carve the allocator just confirmed).
TEST(ContextParallelMemory, ActivationsShrinkWithCpAndTheLongestSequenceGrows) {
  if (world->size() != 4) GTEST_SKIP() << "measured at cp = 4";
  auto& alloc = HostAllocator::instance();
  auto acts_now = [&] { return alloc.stats().current[static_cast<int>(MemCategory::Activations)]; };
  model::GPTConfig c = config(2, false);
  c.block_size = 1024;
  parallel::Mesh mesh(*world, parallel::MeshDims{.cp = 4});
  parallel::ContextParallelGroup cp(mesh.cp(), Device::cpu());
  size_t one = 0;
  {
    const size_t before = acts_now();
    model::GPT m(c, 1, 1024);
    one = acts_now() - before;
  }
  for (CpKind kind : {CpKind::Ring, CpKind::Ulysses}) {
    const size_t before = acts_now();
    model::GPT m(c, 1, 256, Device::cpu(), {}, nullptr, false, {}, model::ContextPart{&cp, kind});
    const size_t mine = acts_now() - before;
    const double ratio = static_cast<double>(mine) / static_cast<double>(one);
    if (world->rank() == 0)
      std::printf("%s: activations per rank at T=1024: cp=1 %zu B, cp=4 %zu B (%.1f%%)\n", model::cp_kind_name(kind),
                  one, mine, 100 * ratio);
    EXPECT_LE(ratio, 0.30) << model::cp_kind_name(kind);
    // The longest T (a multiple of 8) whose activations fit under the one-rank model's at 1024.
    auto fits = [&](int64_t T, int n) {
      model::GPTConfig t = c;
      t.block_size = T;
      return model::GPT::buffers(t, 1, T / n, Device::cpu(), 1, DType::F32, 1, false, {}, model::CpLayout{n, 0, kind})
                 .activation_bytes <= static_cast<int64_t>(one);
    };
    int64_t longest[2] = {0, 0};
    for (int i = 0; i < 2; ++i)
      for (int64_t T = 8; fits(T, i == 0 ? 1 : 4); T += 8) longest[i] = T;
    if (world->rank() == 0)
      std::printf("%s: longest T under %zu B of activations: cp=1 %lld, cp=4 %lld (%.2fx)\n", model::cp_kind_name(kind),
                  one, static_cast<long long>(longest[0]), static_cast<long long>(longest[1]),
                  static_cast<double>(longest[1]) / longest[0]);
    EXPECT_GE(longest[1], 3 * longest[0]) << model::cp_kind_name(kind);
  }
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
