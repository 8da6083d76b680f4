// The mixture-of-experts kernels (kernels/moe.h): routing against a direct
// formulation (softmax or sigmoid scores, top-k with ties to the lower index,
// the score-correction bias, normalisation, scale), its backward against
// finite differences of the weights', balancing and z-loss terms, the token
// movement against plain loops (dropped choices included), and the optimized
// kernels' bits against the reference's on 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/moe.h"

using namespace parallm;
using namespace parallm::kernels;

namespace {

// Logits whose scores are well apart (steps of 0.5 in a random order, plus a little noise), so a finite
// difference never changes the choice.
std::vector<float> spread_logits(int64_t N, int64_t E, uint64_t seed) {
  std::vector<float> z(static_cast<size_t>(N * E));
  const auto noise = test::randv(N * E, seed, 0.05f);
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = E - 1; i > 0; --i)
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>((t * 7 + i * 3 + seed) % (i + 1))]);
    for (int64_t e = 0; e < E; ++e)
      z[static_cast<size_t>(t * E + e)] =
          0.5f * order[static_cast<size_t>(e)] - 1.0f + noise[static_cast<size_t>(t * E + e)];
  }
  return z;
}

struct Case {
  int64_t N, E, K;
  MoeRouting r;
  bool bias;
};

// The direct routing of one token: scores, the chosen ids (descending score + bias, ties to the lower index), weights.
void direct_route(const float* z, const float* bias, int64_t E, int64_t K, MoeRouting r, std::vector<int>& ids,
                  std::vector<double>& w) {
  std::vector<double> s(static_cast<size_t>(E));
  double mx = z[0], sum = 0;
  for (int64_t e = 0; e < E; ++e) mx = std::max(mx, double(z[e]));
  for (int64_t e = 0; e < E; ++e) sum += std::exp(z[e] - mx);
  for (int64_t e = 0; e < E; ++e)
    s[static_cast<size_t>(e)] =
        r.score == MoeScore::Softmax ? std::exp(z[e] - mx) / sum : 1 / (1 + std::exp(-double(z[e])));
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int e) { return float(s[static_cast<size_t>(e)]) + (bias ? bias[e] : 0.0f); };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) > key(b); });
  ids.assign(order.begin(), order.begin() + K);
  w.clear();
  double ws = 0;
  for (int i : ids) ws += s[static_cast<size_t>(i)];
  for (int i : ids) w.push_back((r.norm ? s[static_cast<size_t>(i)] / ws : s[static_cast<size_t>(i)]) * r.scale);
}

const Case kCases[] = {{13, 8, 2, {MoeScore::Softmax, true, 1.0f}, false},
                       {7, 16, 8, {MoeScore::Sigmoid, true, 2.5f}, true},
                       {9, 5, 1, {MoeScore::Softmax, false, 1.0f}, false},
                       {11, 3, 3, {MoeScore::Sigmoid, false, 0.7f}, false}};

}  // namespace

TEST(MoeKernels, RoutingMatchesTheDirectFormulation) {
  for (const Case& c : kCases) {
    const auto z = test::randv(c.N * c.E, 1, 2.0f);
    const auto bias = test::randv(c.E, 2, 0.1f);
    std::vector<float> w(static_cast<size_t>(c.N * c.K)), lse(static_cast<size_t>(c.N));
    std::vector<int32_t> ids(w.size());
    cpu::moe_route_forward(w.data(), ids.data(), lse.data(), z.data(), c.bias ? bias.data() : nullptr, c.N, c.E, c.K,
                           c.r);
    for (int64_t t = 0; t < c.N; ++t) {
      std::vector<int> want;
      std::vector<double> ww;
      direct_route(&z[static_cast<size_t>(t * c.E)], c.bias ? bias.data() : nullptr, c.E, c.K, c.r, want, ww);
      double mx = -1e30, s = 0;
      for (int64_t e = 0; e < c.E; ++e) mx = std::max(mx, double(z[static_cast<size_t>(t * c.E + e)]));
      for (int64_t e = 0; e < c.E; ++e) s += std::exp(z[static_cast<size_t>(t * c.E + e)] - mx);
      EXPECT_NEAR(lse[static_cast<size_t>(t)], mx + std::log(s), 1e-5);
      for (int64_t j = 0; j < c.K; ++j) {
        EXPECT_EQ(ids[static_cast<size_t>(t * c.K + j)], want[static_cast<size_t>(j)])
            << "token " << t << " choice " << j;
        EXPECT_NEAR(w[static_cast<size_t>(t * c.K + j)], ww[static_cast<size_t>(j)],
                    1e-6 * std::max(1.0, ww[static_cast<size_t>(j)]));
      }
    }
  }
}

TEST(MoeKernels, TiesGoToTheLowerExpert) {
  // Equal logits: the first K experts, in index order; a bias breaks the tie its way.
  const int64_t E = 6, K = 3;
  std::vector<float> z(E, 0.25f), w(K), lse(1), bias(E, 0.0f);
  std::vector<int32_t> ids(K);
  for (MoeScore s : {MoeScore::Softmax, MoeScore::Sigmoid}) {
    ref::moe_route_forward(w.data(), ids.data(), lse.data(), z.data(), nullptr, 1, E, K, {s, true, 1.0f});
    EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
    bias[4] = 1e-3f;
    cpu::moe_route_forward(w.data(), ids.data(), lse.data(), z.data(), bias.data(), 1, E, K, {s, true, 1.0f});
    EXPECT_EQ(ids, (std::vector<int32_t>{4, 0, 1}));
    bias[4] = 0.0f;
  }
}

TEST(MoeKernels, RoutingBackwardMatchesFiniteDifferences) {
  for (const Case& c : kCases) {
    auto z = spread_logits(c.N, c.E, 3);
    const auto bias = test::randv(c.E, 4, 0.01f);
    const auto dw = test::randv(c.N * c.K, 5);
    const auto aux = test::randv(c.E, 6, 0.3f);
    const float z_scale = 0.05f;
    // loss = dw . w + sum_t aux . P_t + z_scale * sum_t lse_t^2
    auto loss = [&]() {
      double l = 0;
      for (int64_t t = 0; t < c.N; ++t) {
        const float* zt = &z[static_cast<size_t>(t * c.E)];
        std::vector<int> ids;
        std::vector<double> w;
        direct_route(zt, c.bias ? bias.data() : nullptr, c.E, c.K, c.r, ids, w);
        for (int64_t j = 0; j < c.K; ++j) l += dw[static_cast<size_t>(t * c.K + j)] * w[static_cast<size_t>(j)];
        double mx = -1e30, s = 0, ss = 0;
        for (int64_t e = 0; e < c.E; ++e) mx = std::max(mx, double(zt[e]));
        for (int64_t e = 0; e < c.E; ++e) s += std::exp(zt[e] - mx);
        for (int64_t e = 0; e < c.E; ++e) ss += 1 / (1 + std::exp(-double(zt[e])));
        for (int64_t e = 0; e < c.E; ++e) {
          const double p =
              c.r.score == MoeScore::Softmax ? std::exp(zt[e] - mx) / s : 1 / (1 + std::exp(-double(zt[e]))) / ss;
          l += aux[static_cast<size_t>(e)] * p;
        }
        const double lse = mx + std::log(s);
        l += z_scale * lse * lse;
      }
      return l;
    };
    std::vector<float> w(static_cast<size_t>(c.N * c.K)), lse(static_cast<size_t>(c.N)), dz(z.size());
    std::vector<int32_t> ids(w.size());
    cpu::moe_route_forward(w.data(), ids.data(), lse.data(), z.data(), c.bias ? bias.data() : nullptr, c.N, c.E, c.K,
                           c.r);
    cpu::moe_route_backward(dz.data(), dw.data(), z.data(), ids.data(), lse.data(), aux.data(), z_scale, c.N, c.E, c.K,
                            c.r);
    test::fd_check(z, dz, loss, "d(logits)", 1e-3f, 40);
  }
}

TEST(MoeKernels, TokenMovementMatchesPlainLoops) {
  const int64_t N = 9, K = 3, C = 37, NK = N * K;
  // A permutation of the choices with two dropped ones.
  std::vector<int32_t> slot(NK), src;
  std::vector<int64_t> perm(NK);
  std::iota(perm.begin(), perm.end(), 0);
  std::reverse(perm.begin(), perm.end());
  std::rotate(perm.begin(), perm.begin() + 5, perm.end());
  int32_t next = 0;
  src.assign(NK, 0);
  for (int64_t i : perm) {
    if (i == 4 || i == 20) {
      slot[static_cast<size_t>(i)] = -1;
      continue;
    }
    slot[static_cast<size_t>(i)] = next;
    src[static_cast<size_t>(next++)] = static_cast<int32_t>(i / K);
  }
  const int64_t rows = next;
  const auto x = test::randv(N * C, 7), y = test::randv(NK * C, 8), dout = test::randv(N * C, 9);
  const auto w = test::randv(NK, 10);
  std::vector<float> g(rows * C), out(N * C), dy(NK * C, 0.0f), dwv(NK), dx(N * C);
  cpu::moe_gather(g.data(), x.data(), src.data(), rows, C);
  cpu::moe_combine(out.data(), y.data(), slot.data(), w.data(), N, K, C);
  cpu::moe_combine_backward(dy.data(), dwv.data(), dout.data(), y.data(), slot.data(), w.data(), N, K, C);
  cpu::moe_scatter_add(dx.data(), y.data(), slot.data(), N, K, C);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(g[i * C + c], x[src[i] * C + c]);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double o = 0, d = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int32_t s = slot[t * K + j];
        if (s < 0) continue;
        o += double(w[t * K + j]) * y[s * C + c];
        d += y[s * C + c];
        EXPECT_FLOAT_EQ(dy[s * C + c], w[t * K + j] * dout[t * C + c]);
      }
      EXPECT_NEAR(out[t * C + c], o, 1e-5);
      EXPECT_NEAR(dx[t * C + c], d, 1e-5);
    }
  for (int64_t i = 0; i < NK; ++i) {
    double d = 0;
    if (slot[i] >= 0)
      for (int64_t c = 0; c < C; ++c) d += double(dout[(i / K) * C + c]) * y[slot[i] * C + c];
    EXPECT_NEAR(dwv[i], d, 1e-4) << i;
  }
}

TEST(MoeKernels, OptimizedGivesTheReferencesBitsOnOneAndTwoThreads) {
  const Case c = kCases[1];
  const auto z = test::randv(c.N * c.E, 11, 2.0f);
  const auto bias = test::randv(c.E, 12, 0.1f);
  const auto dw = test::randv(c.N * c.K, 13);
  const auto aux = test::randv(c.E, 14, 0.1f);
  auto run = [&](bool reference) {
    std::vector<float> w(static_cast<size_t>(c.N * c.K)), lse(static_cast<size_t>(c.N)), dz(z.size());
    std::vector<int32_t> ids(w.size());
    auto fwd = reference ? &ref::moe_route_forward : &cpu::moe_route_forward;
    auto bwd = reference ? &ref::moe_route_backward : &cpu::moe_route_backward;
    fwd(w.data(), ids.data(), lse.data(), z.data(), bias.data(), c.N, c.E, c.K, c.r);
    bwd(dz.data(), dw.data(), z.data(), ids.data(), lse.data(), aux.data(), 0.01f, c.N, c.E, c.K, c.r);
    w.insert(w.end(), dz.begin(), dz.end());
    w.insert(w.end(), lse.begin(), lse.end());
    return w;
  };
  const auto want = run(true);
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(run(false), want) << threads << " threads";
  }
}
