// Context-parallel attention of one layer (model/cp_attention.h) under
// mpirun, against the unsplit kernel: every rank builds the same random
// problem, runs its positions through the ring or Ulysses exchange, and the
// ranks' pieces put back in place must give the attention output, its
// log-sum-exp and each of dQ, dK and dV within 1e-5 of that tensor's largest
// magnitude (Megatron-LM #1464 was wrong in the gradients alone), with
// attention dropout on, batch 1 and 3 (DeepSpeed #5808 broke batch > 1), and
// every rank's K/V different (diffusers #14265 computed with stale K/V).
// At 4 ranks also tp 2 x cp 2 (heads split by tp first) and the balance of
// the causal work: the ring's block-kernel CPU time per rank, zigzag against
// the contiguous split.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "model/cp_attention.h"
#include "parallel/context_parallel.h"
#include "parallel/dist_run.h"
#include "parallel/mesh.h"

using namespace parallm;
using model::CpKind;
using test_util::world;

namespace {

std::vector<float> random_floats(int64_t n, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = scale * (u32_to_unit(philox4x32(seed, 0, static_cast<uint64_t>(i))[0]) * 2.0f - 1.0f);
  return v;
}

// The world's sum of every rank's `v` (each element is written by one rank, the rest zero).
void sum_over_world(std::vector<float>& v) {
  world->all_reduce(Tensor::view_of(v.data(), {static_cast<int64_t>(v.size())}, DType::F32));
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Columns [c0, c0 + w) of [rows, W] `full`'s elements compared with `ref`'s, relative to ref's largest magnitude there.
double rel_err(const std::vector<float>& got, const std::vector<float>& ref, int64_t rows, int64_t W, int64_t c0,
               int64_t w) {
  double err = 0, mx = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = c0; c < c0 + w; ++c) {
      const auto i = static_cast<size_t>(r * W + c);
      err = std::max(err, static_cast<double>(std::fabs(got[i] - ref[i])));
      mx = std::max(mx, static_cast<double>(std::fabs(ref[i])));
    }
  return err / std::max(mx, 1e-30);
}

struct Case {
  CpKind kind;
  int64_t B, T;
  float p;
  int tp = 1;
};

// Runs one case on a mesh of cp = world / tp (x tp); every rank checks the gathered tensors.
void check_case(const Case& k) {
  const int n = world->size(), tp = k.tp, cp = n / tp;
  parallel::Mesh mesh(*world, parallel::MeshDims{.tp = tp, .cp = cp});
  parallel::ContextParallelGroup group(mesh.cp(), Device::cpu());
  const int64_t NH = 12, HS = 4, C = NH * HS, B = k.B, T = k.T, Tl = T / cp;
  const int64_t NHl = NH / tp, Cl = C / tp, c0 = mesh.coord().tp * Cl;
  const auto& ops = kernels::ops_for(Device::cpu());
  // The whole problem (every rank the same), K and V different at every position and so on every rank.
  const std::vector<float> qkv = random_floats(B * T * 3 * C, 11, 1.5f), dout = random_floats(B * T * C, 12, 1.0f);
  const kernels::AttnDropout whole_drop{k.p, 5, 9, 0, 0};
  std::vector<float> out(static_cast<size_t>(B * T * C)), lse(static_cast<size_t>(B * NH * T));
  std::vector<float> dqkv(qkv.size());
  std::vector<float> ws(static_cast<size_t>(ops.attention_workspace_floats(B, T, C, NH, 1) * 4));
  kernels::cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, whole_drop, ws.data());
  kernels::cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                                   whole_drop, ws.data());
  // This rank's heads (tp) of its positions (cp).
  model::ContextPart part{&group, k.kind};
  model::CpAttention att(group, part, NH);
  const model::CpLayout& l = att.layout();
  std::vector<float> qkv_tp(static_cast<size_t>(B * T * 3 * Cl)), dout_tp(static_cast<size_t>(B * T * Cl));
  for (int64_t r = 0; r < B * T; ++r) {
    for (int64_t c = 0; c < 3; ++c)
      std::copy_n(qkv.data() + r * 3 * C + c * C + c0, Cl, qkv_tp.data() + r * 3 * Cl + c * Cl);
    std::copy_n(dout.data() + r * C + c0, Cl, dout_tp.data() + r * Cl);
  }
  std::vector<float> q_l(static_cast<size_t>(B * Tl * 3 * Cl)), do_l(static_cast<size_t>(B * Tl * Cl));
  l.slice(qkv_tp.data(), q_l.data(), B, T, 3 * Cl);
  l.slice(dout_tp.data(), do_l.data(), B, T, Cl);
  std::vector<float> o_l(do_l.size()), lse_l(static_cast<size_t>(B * NHl * Tl)), dq_l(q_l.size());
  std::vector<float> out_h(static_cast<size_t>(model::CpAttention::head_out_elems(l, B, Tl, Cl)));
  std::vector<float> scratch(static_cast<size_t>(model::CpAttention::scratch_elems(l, B, Tl, Cl)));
  std::vector<float> ws_l(static_cast<size_t>(
      model::CpAttention::workspace_floats(l, Device::cpu(), B, Tl, Cl, NHl, omp_get_max_threads(), false)));
  // As GPT::attn_dropout: this tp rank's heads among all NH.
  const kernels::AttnDropout drop{k.p, 5, 9, mesh.coord().tp * NHl, tp > 1 ? NH : 0};
  att.forward(ops, o_l.data(), lse_l.data(), q_l.data(), out_h.empty() ? nullptr : out_h.data(), B, Tl, Cl, NHl, drop,
              ws_l.data(), scratch.data());
  att.backward(ops, dq_l.data(), do_l.data(), q_l.data(), o_l.data(), out_h.empty() ? nullptr : out_h.data(),
               lse_l.data(), B, Tl, Cl, NHl, drop, ws_l.data(), scratch.data());
  // Back in place: positions (cp), then columns (tp).
  std::vector<float> o_tp(dout_tp.size()), dq_tp(qkv_tp.size());
  l.place(o_l.data(), o_tp.data(), B, T, Cl);
  l.place(dq_l.data(), dq_tp.data(), B, T, 3 * Cl);
  std::vector<float> got_out(out.size(), 0.0f), got_dqkv(dqkv.size(), 0.0f), got_lse(lse.size(), 0.0f);
  for (int64_t r = 0; r < B * T; ++r) {
    std::copy_n(o_tp.data() + r * Cl, Cl, got_out.data() + r * C + c0);
    for (int64_t c = 0; c < 3; ++c)
      std::copy_n(dq_tp.data() + r * 3 * Cl + c * Cl, Cl, got_dqkv.data() + r * 3 * C + c * C + c0);
  }
  if (k.kind == CpKind::Ring) {  // lse [B, NHl, Tl] in local order: rows of this rank's heads and positions
    const auto pos = l.positions(T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NHl; ++h)
        for (int64_t i = 0; i < Tl; ++i)
          got_lse[static_cast<size_t>((b * NH + mesh.coord().tp * NHl + h) * T + pos[static_cast<size_t>(i)])] =
              lse_l[static_cast<size_t>((b * NHl + h) * Tl + i)];
  }
  sum_over_world(got_out);
  sum_over_world(got_dqkv);
  sum_over_world(got_lse);
  const std::string what = std::string(model::cp_kind_name(k.kind)) + " cp=" + std::to_string(cp) +
                           " tp=" + std::to_string(tp) + " B=" + std::to_string(B) + " T=" + std::to_string(T) +
                           " p=" + std::to_string(k.p);
  const double e_out = rel_err(got_out, out, B * T, C, 0, C), e_dq = rel_err(got_dqkv, dqkv, B * T, 3 * C, 0, C),
               e_dk = rel_err(got_dqkv, dqkv, B * T, 3 * C, C, C),
               e_dv = rel_err(got_dqkv, dqkv, B * T, 3 * C, 2 * C, C);
  if (world->rank() == 0)
    std::printf("%s: out %.2g, dQ %.2g, dK %.2g, dV %.2g of each tensor's max-abs\n", what.c_str(), e_out, e_dq, e_dk,
                e_dv);
  EXPECT_LE(e_out, 1e-5) << what << ": attention output";
  EXPECT_LE(e_dq, 1e-5) << what << ": dQ";
  EXPECT_LE(e_dk, 1e-5) << what << ": dK";
  EXPECT_LE(e_dv, 1e-5) << what << ": dV";
  if (k.kind == CpKind::Ring) {
    EXPECT_LE(rel_err(got_lse, lse, B * NH, T, 0, T), 1e-6) << what << ": lse";
  }
  ASSERT_GT(max_abs(dqkv), 0.0);
}

}  // namespace

TEST(CpAttention, RingAndUlyssesGiveTheUnsplitLayerAndItsGradients) {
  const int n = world->size();
  for (CpKind kind : {CpKind::Ring, CpKind::Ulysses})
    for (int64_t B : {1, 3})
      for (float p : {0.0f, 0.1f}) check_case({kind, B, 24 * n, p});
  // Chunks that are not a multiple of the kernels' 32-row blocks.
  check_case({CpKind::Ring, 2, 2 * n * 37, 0.1f});
}

TEST(CpAttention, TensorTimesContextParallelSplitsHeadsThenPositions) {
  if (world->size() != 4) GTEST_SKIP() << "tp 2 x cp 2 needs 4 ranks";
  for (CpKind kind : {CpKind::Ring, CpKind::Ulysses}) check_case({kind, 3, 48, 0.1f, 2});
}

// The ring's causal balance at cp = 4, T = 1024, two ways. Counted (the
// assertion): the causal query-key pairs in the blocks ring_step gives each
// rank over all steps, which is the work the passes do (every block is
// computed as ring_step lists it); the zigzag split gives every rank the same
// count, the contiguous one 1 : 3 : 5 : 7 (about). Timed (observed): the
// thread CPU time of each rank's block kernels in a forward and backward (not
// waits; one thread a rank), each ring step's least over 32 repetitions,
// summed. 20 quiet runs with 4 ranks on 2 cores: zigzag 1.01 to 1.07,
// contiguous 5.5 to 5.9; under ctest -j2 other tests share the cores and a CI
// run measured the zigzag at 1.39, so time only asserts that the contiguous
// split is far less balanced than the zigzag.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kTimedReps = 2;  // instrumented code: only the contiguous split's far worse balance is asserted
#else
constexpr int kTimedReps = 32;
#endif

// Causal query-key pairs of the blocks rank l.rank computes over a ring of T positions.
int64_t ring_causal_pairs(const model::CpLayout& l, int64_t T) {
  int64_t pairs = 0;
  for (int s = 0; s < l.size; ++s)
    for (const model::RingStep::Block& b : model::CpAttention::ring_step(l, T, s))
      for (int64_t q = b.q.global; q < b.q.global + b.q.len; ++q)
        pairs += std::max<int64_t>(0, std::min(q + 1, b.k.global + b.k.len) - b.k.global);
  return pairs;
}

TEST(CpAttention, RingStepsGiveEveryZigzagRankTheSameCausalWork) {
  for (int C : {2, 3, 4, 5, 8})
    for (bool zigzag : {true, false}) {
      const int64_t T = 2 * C * 37;
      int64_t total = 0, lo = INT64_MAX, hi = 0;
      for (int r = 0; r < C; ++r) {
        model::CpLayout l;
        l.size = C;
        l.rank = r;
        l.zigzag = zigzag;
        const int64_t p = ring_causal_pairs(l, T);
        total += p;
        lo = std::min(lo, p);
        hi = std::max(hi, p);
      }
      EXPECT_EQ(total, T * (T + 1) / 2) << "C=" << C << (zigzag ? " zigzag" : " contiguous") << ": the blocks cover "
                                        << "every causal pair once";
      if (zigzag)
        EXPECT_EQ(hi, lo) << "C=" << C << ": zigzag ranks differ in causal work";
      else
        EXPECT_GE(static_cast<double>(hi) / static_cast<double>(lo), C - 0.5) << "C=" << C << " contiguous";
    }
}

TEST(CpAttention, ZigzagBalancesTheCausalWorkAcrossRanks) {
  if (world->size() != 4) GTEST_SKIP() << "measured at cp = 4";
  const int64_t NH = 8, HS = 32, C = NH * HS, B = 4, T = 1024, Tl = T / 4;
  parallel::Mesh mesh(*world, parallel::MeshDims{.cp = 4});
  parallel::ContextParallelGroup group(mesh.cp(), Device::cpu());
  const auto& ops = kernels::ops_for(Device::cpu());
  double ratio[2] = {0, 0};
  for (bool zigzag : {true, false}) {
    model::ContextPart part{&group, CpKind::Ring, zigzag};
    model::CpAttention att(group, part, NH);
    const model::CpLayout& l = att.layout();
    std::vector<float> qkv = random_floats(B * Tl * 3 * C, 20 + world->rank(), 1.0f);
    std::vector<float> dout = random_floats(B * Tl * C, 40 + world->rank(), 1.0f);
    std::vector<float> out(dout.size()), lse(static_cast<size_t>(B * NH * Tl)), dqkv(qkv.size());
    std::vector<float> scratch(static_cast<size_t>(model::CpAttention::scratch_elems(l, B, Tl, C)));
    std::vector<float> ws(static_cast<size_t>(
        model::CpAttention::workspace_floats(l, Device::cpu(), B, Tl, C, NH, omp_get_max_threads(), false)));
    std::vector<double> least(att.step_cpu_seconds().size(), 1e30);
    for (int rep = 0; rep < kTimedReps; ++rep) {
      const std::vector<double> before = att.step_cpu_seconds();
      att.forward(ops, out.data(), lse.data(), qkv.data(), static_cast<float*>(nullptr), B, Tl, C, NH, {}, ws.data(),
                  scratch.data());
      att.backward(ops, dqkv.data(), dout.data(), qkv.data(), out.data(), static_cast<const float*>(nullptr),
                   lse.data(), B, Tl, C, NH, {}, ws.data(), scratch.data());
      for (size_t i = 0; i < least.size(); ++i) least[i] = std::min(least[i], att.step_cpu_seconds()[i] - before[i]);
    }
    float mine = 0;
    for (double t : least) mine += static_cast<float>(t);
    std::vector<float> all(4);
    world->all_gather(Tensor::view_of(&mine, {1}, DType::F32), Tensor::view_of(all.data(), {4}, DType::F32));
    const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
    ratio[zigzag ? 0 : 1] = *hi / *lo;
    if (world->rank() == 0)
      std::printf("ring %s split, cp=4, T=%lld: block-kernel CPU ms per rank %.2f %.2f %.2f %.2f, busiest/least %.2f\n",
                  zigzag ? "zigzag" : "contiguous", static_cast<long long>(T), 1e3 * all[0], 1e3 * all[1], 1e3 * all[2],
                  1e3 * all[3], *hi / *lo);
  }
#if defined(__SANITIZE_ADDRESS__)
  // Instrumented code does not keep the kernels' cost proportions.
  EXPECT_GE(ratio[1], 1.5 * ratio[0]) << "the contiguous split should be less balanced than the zigzag";
#else
  EXPECT_GE(ratio[1], 2 * ratio[0]) << "the contiguous split should be far less balanced than the zigzag";
#endif
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
