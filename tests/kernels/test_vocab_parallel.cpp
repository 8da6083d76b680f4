// The vocabulary-parallel kernels: the optimized CPU kernels against the
// reference on odd shapes (a rank's rows starting past 0, some padded or none
// valid, tokens and targets inside and outside its rows), and the contract
// itself: a vocabulary split over P simulated ranks, the group's all-reduces
// done on the host, gives the one-rank embedding, losses and gradients.
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/classifier.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/vocab_parallel.h"

using namespace parallm;
using namespace parallm::kernels;
using parallm::test::expect_close;
using parallm::test::randv;

namespace {

// A rank's rows [v0, v0 + vn), the first `valid` of them real.
struct Shard {
  int64_t v0, vn, valid;
};

// Runs f once with one thread and once with the default count, and checks both
// give the same bits (f returns its outputs).
template <class F>
void expect_thread_count_independent(F f, const char* what) {
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  auto one = f();
  omp_set_num_threads(nt);
  EXPECT_EQ(f(), one) << what << " depends on the thread count";
}

}  // namespace

TEST(VocabParallel, EmbeddingMatchesReferenceOnOddShapes) {
  const int64_t B = 3, T = 7, C = 13, vn = 11, v0 = 22;
  std::vector<int32_t> tok(B * T);
  for (int64_t i = 0; i < B * T; ++i) tok[i] = static_cast<int32_t>((i * i * 5 + 3) % 50);  // in [22, 33) or not
  int mine = 0;
  for (int32_t t : tok) mine += t >= v0 && t < v0 + vn;
  ASSERT_GT(mine, 2);
  ASSERT_LT(mine, B * T - 2);
  auto wte = randv(vn * C, 70), wpe = randv(T * C, 71), dy = randv(B * T * C, 72);
  for (bool with_wpe : {true, false}) {
    SCOPED_TRACE(with_wpe ? "with wpe" : "without wpe");
    const float* p = with_wpe ? wpe.data() : nullptr;
    std::vector<float> o1(B * T * C, NAN), o2(B * T * C, NAN);
    ref::vp_embedding_forward(o1.data(), tok.data(), wte.data(), p, B, T, C, v0, vn);
    cpu::vp_embedding_forward(o2.data(), tok.data(), wte.data(), p, B, T, C, v0, vn);
    EXPECT_EQ(o2, o1);
    for (int64_t i = 0; i < B * T; ++i) {
      if (with_wpe || (tok[i] >= v0 && tok[i] < v0 + vn)) continue;
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(o2[i * C + c], 0.0f) << "another rank's token";
    }

    const auto g0 = randv(vn * C, 73), q0 = randv(T * C, 74);
    auto g1 = g0, q1 = q0;
    ref::vp_embedding_backward(g1.data(), with_wpe ? q1.data() : nullptr, dy.data(), tok.data(), B, T, C, v0, vn);
    expect_thread_count_independent(
        [&] {
          auto g2 = g0, q2 = q0;
          cpu::vp_embedding_backward(g2.data(), with_wpe ? q2.data() : nullptr, dy.data(), tok.data(), B, T, C, v0, vn);
          // Each element sums in the reference's order: the same bits.
          EXPECT_EQ(g2, g1) << "dwte";
          EXPECT_EQ(q2, q1) << "dwpe";
          g2.insert(g2.end(), q2.begin(), q2.end());
          return g2;
        },
        "vp_embedding_backward");
  }
}

TEST(VocabParallel, CrossEntropyStepsMatchReferenceOnOddShapes) {
  const int64_t N = 7, vn = 11, v0 = 22;
  const float dloss = 0.3f;
  for (int64_t valid : {11, 5, 0}) {
    SCOPED_TRACE("valid = " + std::to_string(valid));
    auto logits = randv(N * vn, 80, 3.0f);
    // Targets: on this rank's valid columns, on its padded ones, on other ranks.
    std::vector<int32_t> tgt = {22, 26, 27, 32, 3, 40, 24};
    // mx: this rank's maxima combined with another rank's (as the all-reduce).
    std::vector<float> m1(N), m2(N);
    ref::xent_vp_local_max(m1.data(), logits.data(), N, vn, valid);
    cpu::xent_vp_local_max(m2.data(), logits.data(), N, vn, valid);
    EXPECT_EQ(m2, m1);
    for (int64_t i = 0; i < N; ++i) {
      if (valid == 0) {
        EXPECT_EQ(m1[i], -INFINITY);
      }
      m1[i] = std::max(m1[i], 0.5f * static_cast<float>(i % 3));  // the group's maxima
    }
    std::vector<float> s1(2 * N, NAN), s2(2 * N, NAN);
    ref::xent_vp_exp_sums(s1.data(), logits.data(), m1.data(), tgt.data(), N, vn, valid, v0);
    cpu::xent_vp_exp_sums(s2.data(), logits.data(), m1.data(), tgt.data(), N, vn, valid, v0);
    expect_close(std::vector<float>(s2.begin(), s2.begin() + N), std::vector<float>(s1.begin(), s1.begin() + N), 1e-6,
                 0, "exp sums");
    for (int64_t i = 0; i < N; ++i) {
      const int64_t t = tgt[i] - v0;
      const bool here = t >= 0 && t < valid;
      EXPECT_EQ(s2[N + i], here ? logits[i * vn + t] : 0.0f) << "target logit of row " << i;
      EXPECT_EQ(s1[N + i], s2[N + i]);
      if (valid == 0) {
        EXPECT_EQ(s2[i], 0.0f);
      }
    }
    if (valid > 0) {
      std::vector<float> l1(N), l2(N);
      ref::xent_vp_losses(l1.data(), m1.data(), s1.data(), N);
      cpu::xent_vp_losses(l2.data(), m1.data(), s1.data(), N);
      EXPECT_EQ(l2, l1);
    }
    // se: this rank's sums plus another rank's share (the all-reduce).
    std::vector<float> se(N);
    for (int64_t i = 0; i < N; ++i) se[i] = s1[i] + 1.5f;
    std::vector<float> d1(N * vn, NAN), d2(N * vn, NAN);
    ref::xent_vp_grad(d1.data(), logits.data(), m1.data(), se.data(), tgt.data(), N, vn, valid, v0, dloss);
    cpu::xent_vp_grad(d2.data(), logits.data(), m1.data(), se.data(), tgt.data(), N, vn, valid, v0, dloss);
    expect_close(d2, d1, 1e-5, 1e-3, "d(logits)");
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = valid; j < vn; ++j) ASSERT_EQ(d2[i * vn + j], 0.0f) << "padded column " << j;
    auto in_place = logits;  // dlogits may alias logits
    cpu::xent_vp_grad(in_place.data(), in_place.data(), m1.data(), se.data(), tgt.data(), N, vn, valid, v0, dloss);
    EXPECT_EQ(in_place, d2) << "in place";
    expect_thread_count_independent(
        [&] {
          std::vector<float> s(2 * N), d(N * vn);
          cpu::xent_vp_exp_sums(s.data(), logits.data(), m1.data(), tgt.data(), N, vn, valid, v0);
          cpu::xent_vp_grad(d.data(), logits.data(), m1.data(), se.data(), tgt.data(), N, vn, valid, v0, dloss);
          s.insert(s.end(), d.begin(), d.end());
          return s;
        },
        "the cross-entropy steps");
  }
}

TEST(VocabParallel, InEveryKernelTable) {
  const Ops& k = ops_for(Device::cpu());
  EXPECT_EQ(k.vp_embedding_forward, &cpu::vp_embedding_forward);
  EXPECT_EQ(k.vp_embedding_backward, &cpu::vp_embedding_backward);
  EXPECT_EQ(k.xent_vp_local_max, &cpu::xent_vp_local_max);
  EXPECT_EQ(k.xent_vp_exp_sums, &cpu::xent_vp_exp_sums);
  EXPECT_EQ(k.xent_vp_losses, &cpu::xent_vp_losses);
  EXPECT_EQ(k.xent_vp_grad, &cpu::xent_vp_grad);
  const ModelOps<bfloat16>& b = bf16_ops_for(Device::cuda(0));
  EXPECT_NE(b.vp_embedding_forward, nullptr);
  EXPECT_NE(b.vp_embedding_backward, nullptr);
  EXPECT_NE(b.xent_vp_local_max, nullptr);
  EXPECT_NE(b.xent_vp_exp_sums, nullptr);
  EXPECT_NE(b.xent_vp_losses, nullptr);
  EXPECT_NE(b.xent_vp_grad, nullptr);
  EXPECT_NE(ops_for(Device::cuda(0)).xent_vp_grad, nullptr);
}

// V = 65 split over P = 2, 3, 4 ranks of vn = ceil(V / P) rows (the last
// rank's rows padded past V); the group's all-reduces are a max or a sum over
// the ranks on the host, in rank order.
TEST(VocabParallel, SplitOverRanksEqualsTheOneRankKernels) {
  const int64_t V = 65, B = 3, T = 5, C = 24, N = B * T;
  const float dloss = 1.0f / N;
  std::vector<int32_t> tok(N), tgt(N);
  for (int64_t i = 0; i < N; ++i) {
    tok[i] = static_cast<int32_t>((i * i * 13 + 5) % V);  // repeated tokens, on every rank
    tgt[i] = static_cast<int32_t>((i * 29 + 64) % V);
  }
  tok[3] = tok[9] = V - 1;
  auto x = randv(N * C, 90), wpe = randv(T * C, 91), dy = randv(N * C, 92), dwte0 = randv(V * C, 93),
       dwpe0 = randv(T * C, 94);
  for (int64_t P : {2, 3, 4}) {
    SCOPED_TRACE("P = " + std::to_string(P));
    const int64_t vn = (V + P - 1) / P, Vp = P * vn;
    std::vector<Shard> shards;
    for (int64_t r = 0; r < P; ++r) shards.push_back({r * vn, vn, std::max<int64_t>(0, std::min(vn, V - r * vn))});
    // The padded table: real rows, then rows no result may read (huge values).
    auto wte = randv(Vp * C, 95);
    for (int64_t i = V * C; i < Vp * C; ++i) wte[i] = 1e30f;
    const std::vector<float> wte_real(wte.begin(), wte.begin() + V * C);
    auto shard_of = [&](const std::vector<float>& t, const Shard& s) {
      return std::vector<float>(t.begin() + s.v0 * C, t.begin() + (s.v0 + s.vn) * C);
    };
    const int64_t wpe_rank = P - 1;  // the one part that adds wpe

    // (a) The embedding: the parts' sum is the one-rank embedding, bit for bit.
    std::vector<float> emb(N * C), sum(N * C, 0.0f);
    cpu::embedding_forward(emb.data(), tok.data(), wte_real.data(), wpe.data(), B, T, C);
    for (int64_t r = 0; r < P; ++r) {
      std::vector<float> part(N * C, NAN), w = shard_of(wte, shards[r]);
      cpu::vp_embedding_forward(part.data(), tok.data(), w.data(), r == wpe_rank ? wpe.data() : nullptr, B, T, C,
                                shards[r].v0, vn);
      for (int64_t i = 0; i < N * C; ++i) sum[i] += part[i];
    }
    EXPECT_EQ(sum, emb) << "embedding";

    // (b) The losses, from the three steps with the all-reduces between them.
    std::vector<float> want_loss(N), want_dx(N * C), want_dwte(V * C, 0.0f);
    std::vector<float> ws(cpu::classifier_workspace_floats(N, V, omp_get_max_threads()));
    cpu::classifier_forward_backward(want_loss.data(), want_dx.data(), want_dwte.data(), x.data(), wte_real.data(),
                                     tgt.data(), N, C, V, dloss, ws.data());
    std::vector<std::vector<float>> logits(P);
    std::vector<float> mx(N, -INFINITY), sums(2 * N, 0.0f);
    for (int64_t r = 0; r < P; ++r) {
      const auto w = shard_of(wte, shards[r]);
      logits[r].resize(N * vn);
      cpu::classifier_logits(logits[r].data(), x.data(), w.data(), N, C, vn);
      std::vector<float> m(N);
      cpu::xent_vp_local_max(m.data(), logits[r].data(), N, vn, shards[r].valid);
      for (int64_t i = 0; i < N; ++i) mx[i] = std::max(mx[i], m[i]);
    }
    for (int64_t r = 0; r < P; ++r) {
      std::vector<float> s(2 * N);
      cpu::xent_vp_exp_sums(s.data(), logits[r].data(), mx.data(), tgt.data(), N, vn, shards[r].valid, shards[r].v0);
      for (int64_t i = 0; i < 2 * N; ++i) sums[i] += s[i];
    }
    std::vector<float> loss(N);
    cpu::xent_vp_losses(loss.data(), mx.data(), sums.data(), N);
    expect_close(loss, want_loss, 1e-6, 0, "losses");

    // (c) d(logits) through the shard: dx summed over the ranks, dwte per shard.
    std::vector<float> dx(N * C, 0.0f), dwte(Vp * C, 0.0f);
    for (int64_t r = 0; r < P; ++r) {
      const auto w = shard_of(wte, shards[r]);
      cpu::xent_vp_grad(logits[r].data(), logits[r].data(), mx.data(), sums.data(), tgt.data(), N, vn, shards[r].valid,
                        shards[r].v0, dloss);
      std::vector<float> dxr(N * C);
      cpu::matmul_backward(dxr.data(), dwte.data() + shards[r].v0 * C, nullptr, logits[r].data(), x.data(), w.data(), N,
                           C, vn);
      for (int64_t i = 0; i < N * C; ++i) dx[i] += dxr[i];
    }
    expect_close(dx, want_dx, 1e-5, 1.0, "dx");
    expect_close(std::vector<float>(dwte.begin(), dwte.begin() + V * C), want_dwte, 1e-5, 1.0, "dwte");
    for (int64_t i = V * C; i < Vp * C; ++i) ASSERT_EQ(dwte[i], 0.0f) << "padded row " << i / C << " got gradient";

    // (d) The embedding backward: each rank's rows and the one dwpe are the
    // one-rank gradients' bits.
    auto want_g = dwte0, want_p = dwpe0;
    cpu::embedding_backward(want_g.data(), want_p.data(), dy.data(), tok.data(), B, T, C);
    std::vector<float> g(Vp * C, 0.0f), p = dwpe0;
    std::copy(dwte0.begin(), dwte0.end(), g.begin());
    for (int64_t r = 0; r < P; ++r)
      cpu::vp_embedding_backward(g.data() + shards[r].v0 * C, r == wpe_rank ? p.data() : nullptr, dy.data(), tok.data(),
                                 B, T, C, shards[r].v0, vn);
    EXPECT_EQ(std::vector<float>(g.begin(), g.begin() + V * C), want_g) << "dwte";
    EXPECT_EQ(p, want_p) << "dwpe";
    for (int64_t i = V * C; i < Vp * C; ++i) ASSERT_EQ(g[i], 0.0f) << "padded row " << i / C << " got gradient";
  }
}
