// Context parallelism's sequence split (model/cp_layout.h): every rank's
// positions together are each position once, the zigzag gives rank r chunks
// r and 2C-1-r and equal causal work, slice and place are inverses, and the
// layouts that do not split are refused by message.
#include <gtest/gtest.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"
#include "model/cp_attention.h"
#include "model/cp_layout.h"
#include "train/error_of.h"

using namespace parallm;
using namespace parallm::model;

TEST(CpLayout, RanksTogetherHoldEveryPositionOnceAndZigzagBalancesCausalWork) {
  for (CpKind kind : {CpKind::Ring, CpKind::Ulysses})
    for (int C : {1, 2, 3, 4}) {
      const int64_t T = 24 * C;
      std::vector<int64_t> all;
      std::vector<int64_t> work;  // causal score entries of each rank's queries: sum of (position + 1)
      for (int r = 0; r < C; ++r) {
        const auto p = CpLayout{C, r, kind}.positions(T);
        EXPECT_EQ(static_cast<int64_t>(p.size()), T / C);
        all.insert(all.end(), p.begin(), p.end());
        work.push_back(std::accumulate(p.begin(), p.end(), int64_t{0}) + static_cast<int64_t>(p.size()));
      }
      std::sort(all.begin(), all.end());
      std::vector<int64_t> want(static_cast<size_t>(T));
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(all, want) << cp_kind_name(kind) << " cp=" << C;
      const auto [lo, hi] = std::minmax_element(work.begin(), work.end());
      if (kind == CpKind::Ring) {
        EXPECT_EQ(*lo, *hi) << "zigzag at cp=" << C << " is not balanced";
      } else if (C == 4) {
        EXPECT_GT(static_cast<double>(*hi) / static_cast<double>(*lo), 5.0) << "the contiguous split at cp=4";
      }
    }
  const auto r1 = CpLayout{4, 1, CpKind::Ring}.runs(16);  // chunks of 2: rank 1 holds chunks 1 and 6
  ASSERT_EQ(r1.n, 2);
  EXPECT_EQ(r1.run[0].global, 2);
  EXPECT_EQ(r1.run[1].global, 12);
  EXPECT_EQ(r1.run[1].local, 2);
  for (CpKind kind : {CpKind::Ring, CpKind::Ulysses})  // owner() inverts positions()
    for (int r = 0; r < 4; ++r) {
      const CpLayout l{4, r, kind};
      const auto pos = l.positions(16);
      for (size_t i = 0; i < pos.size(); ++i)
        EXPECT_EQ(l.owner(pos[i], 16), std::make_pair(r, static_cast<int64_t>(i))) << cp_kind_name(kind);
    }
  const CpLayout contiguous{4, 3, CpKind::Ring, /*zigzag=*/false};
  EXPECT_EQ(contiguous.positions(8), (std::vector<int64_t>{6, 7}));
}

TEST(CpLayout, SliceAndPlaceAreInverses) {
  const int64_t B = 3, T = 16, W = 5;
  std::vector<float> full(static_cast<size_t>(B * T * W));
  std::iota(full.begin(), full.end(), 0.0f);
  for (CpKind kind : {CpKind::Ring, CpKind::Ulysses}) {
    std::vector<float> back(full.size(), -1.0f);
    for (int r = 0; r < 4; ++r) {
      const CpLayout l{4, r, kind};
      std::vector<float> local(static_cast<size_t>(B * T / 4 * W));
      l.slice(full.data(), local.data(), B, T, W);
      const auto pos = l.positions(T);
      for (int64_t b = 0; b < B; ++b)
        for (size_t i = 0; i < pos.size(); ++i)
          ASSERT_EQ(local[static_cast<size_t>((b * static_cast<int64_t>(pos.size()) + static_cast<int64_t>(i)) * W)],
                    full[static_cast<size_t>((b * T + pos[i]) * W)]);
      l.place(local.data(), back.data(), B, T, W);
    }
    EXPECT_EQ(back, full) << cp_kind_name(kind);
  }
}

TEST(CpLayout, LayoutsThatDoNotSplitAreRefusedByMessage) {
  EXPECT_NO_THROW(check_cp_layout(CpKind::Ring, 4, 64, 6, 1));
  std::string e = test_util::error_of<ConfigError>([] { check_cp_layout(CpKind::Ring, 4, 60, 12, 1); });
  EXPECT_NE(e.find("model.block_size=60 is not divisible by 2 x parallel.cp = 8"), std::string::npos) << e;
  e = test_util::error_of<ConfigError>([] { check_cp_layout(CpKind::Ulysses, 4, 64, 6, 1); });
  EXPECT_NE(e.find("model.n_head=6 is not divisible by parallel.tp=1 x parallel.cp=4"), std::string::npos) << e;
  e = test_util::error_of<ConfigError>([] { check_cp_layout(CpKind::Ulysses, 2, 64, 12, 4); });
  EXPECT_NE(e.find("model.n_head=12 is not divisible by parallel.tp=4 x parallel.cp=2"), std::string::npos) << e;
  EXPECT_NO_THROW(check_cp_layout(CpKind::Ulysses, 3, 63, 12, 4));
}

// The ring's causal balance, replayed in one process so that no other rank
// shares the cores: each of 4 ranks' blocks (CpAttention::ring_step, the
// schedule the ring runs) through the block kernels, forward and backward,
// on one thread timed by its CPU clock (a test running beside this one
// cannot add to it), per rank the least of 11 repetitions, ranks
// interleaved, T = 1024. The zigzag's ranks
// compute the same score entries (exactly) and take the same time (within
// 15%); the contiguous split's last rank about 7 times the first's.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kTimedReps = 1;  // the times are not compared in an instrumented build (below)
#else
constexpr int kTimedReps = 11;
#endif

TEST(CpBalance, ZigzagRanksDoTheSameAttentionWork) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const int C = 4;
  const int64_t NH = 8, HS = 32, Cw = NH * HS, B = 2, T = 1024, Tl = T / C;
  const auto& k = kernels::ops_for(Device::cpu());
  auto rnd = [](int64_t n, uint64_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      v[static_cast<size_t>(i)] = u32_to_unit(philox4x32(seed, 0, static_cast<uint64_t>(i))[0]) - 0.5f;
    return v;
  };
  const std::vector<float> qkv = rnd(B * Tl * 3 * Cw, 1), kv = rnd(B * Tl * 2 * Cw, 2), dout = rnd(B * Tl * Cw, 3);
  std::vector<float> out(dout.size()), lse(static_cast<size_t>(B * NH * Tl)), dq(qkv.size()), dkv(kv.size());
  std::vector<float> ws(static_cast<size_t>(k.attention_block_workspace_floats(B, NH, Tl, Tl, HS, 1)));
  double ratio[2] = {0, 0};
  for (bool zigzag : {true, false}) {
    std::vector<double> secs(C, 1e30);
    std::vector<int64_t> entries(C, 0);
    for (int r = 0; r < C; ++r)
      for (int s = 0; s < C; ++s)
        for (const auto& b : CpAttention::ring_step(CpLayout{C, r, CpKind::Ring, zigzag}, T, s))
          for (int64_t i = 0; i < b.q.len; ++i)
            entries[r] += std::clamp<int64_t>(b.q.global + i + 1 - b.k.global, 0, b.k.len);
    for (int rep = 0; rep < kTimedReps; ++rep)
      for (int r = C - 1; r >= 0; --r) {
        const CpLayout l{C, r, CpKind::Ring, zigzag};
        const double t0 = cpu_seconds();
        bool seen[2] = {false, false};
        for (int s = 0; s < C; ++s)
          for (const auto& b : CpAttention::ring_step(l, T, s)) {
            kernels::AttnBlock blk{B,          NH,      HS,     b.q.len,     b.k.len, b.q.global,
                                   b.k.global, T,       3 * Cw, Tl * 3 * Cw, 2 * Cw,  Tl * 2 * Cw,
                                   Cw,         Tl * Cw, Tl,     !seen[b.qi]};
            seen[b.qi] = true;
            const float* kp = kv.data() + b.k.local * 2 * Cw;
            k.attention_block_forward(out.data() + b.q.local * Cw, lse.data() + b.q.local,
                                      qkv.data() + b.q.local * 3 * Cw, kp, kp + Cw, blk, {}, ws.data());
            k.attention_block_backward(dq.data() + b.q.local * 3 * Cw, dkv.data() + b.k.local * 2 * Cw,
                                       dkv.data() + b.k.local * 2 * Cw + Cw, dout.data() + b.q.local * Cw,
                                       qkv.data() + b.q.local * 3 * Cw, kp, kp + Cw, out.data() + b.q.local * Cw,
                                       lse.data() + b.q.local, blk, {}, ws.data());
          }
        secs[r] = std::min(secs[r], cpu_seconds() - t0);
      }
    const auto [lo, hi] = std::minmax_element(secs.begin(), secs.end());
    ratio[zigzag ? 0 : 1] = *hi / *lo;
    std::printf(
        "%s split, cp=4, T=1024: score entries per rank %lld %lld %lld %lld; attention ms %.2f %.2f %.2f %.2f, "
        "busiest/least %.2f\n",
        zigzag ? "zigzag" : "contiguous", static_cast<long long>(entries[0]), static_cast<long long>(entries[1]),
        static_cast<long long>(entries[2]), static_cast<long long>(entries[3]), 1e3 * secs[0], 1e3 * secs[1],
        1e3 * secs[2], 1e3 * secs[3], *hi / *lo);
    if (zigzag) {
      for (int r = 1; r < C; ++r) EXPECT_EQ(entries[r], entries[0]) << "rank " << r;
    } else {
      EXPECT_GT(static_cast<double>(entries[C - 1]) / static_cast<double>(entries[0]), 6.0);
    }
  }
  omp_set_num_threads(threads);
  // The entries above are the check. Time follows them on a quiet machine
  // (zigzag about 1.0, contiguous 5 to 6) but not under ctest -j2, where
  // other tests share the cores (the ring's twin measured 1.39 in CI), nor
  // in instrumented code: only the far worse contiguous balance is asserted.
#if defined(__SANITIZE_ADDRESS__)
  std::printf("(ASan build: the time ratios %.2f and %.2f are not compared)\n", ratio[0], ratio[1]);
#else
  EXPECT_GE(ratio[1], 2 * ratio[0]) << "the contiguous split should be far less balanced than the zigzag";
#endif
}
