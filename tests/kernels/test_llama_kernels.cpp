// The Llama family's kernels (rmsnorm.h, rope.h, swiglu.h): the optimized CPU
// kernels against the references on odd shapes, the references' backward by
// finite differences, and the CPU kernels' bits independent of the thread count.
#include <omp.h>

#include <functional>

#include "kernel_test_util.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

using namespace parallm;
using namespace parallm::kernels;
using parallm::test::expect_close;
using parallm::test::randv;

using parallm::test::dotv;
using parallm::test::fd_check;

namespace {
// A rope table [T, D]: cos | sin of t * f_i for made-up frequencies.
std::vector<float> rope_table(int64_t T, int64_t D) {
  std::vector<float> t(static_cast<size_t>(T * D));
  for (int64_t r = 0; r < T; ++r)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = (r + 3) * std::pow(0.37, static_cast<double>(i));
      t[r * D + i] = static_cast<float>(std::cos(a));
      t[r * D + D / 2 + i] = static_cast<float>(std::sin(a));
    }
  return t;
}
struct RopeShape {
  int64_t B, T, H, KV, D;
};
}  // namespace

TEST(LlamaKernels, RmsNormMatchesReferenceOnOddShapes) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{7, 13}, {5, 37}, {33, 130}, {3, 1}}) {
    auto x = randv(N * C, 1, 2.0f), w = randv(C, 2), dy = randv(N * C, 3);
    std::vector<float> y(N * C), r(N), y_ref(N * C), r_ref(N);
    cpu::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5f);
    ref::rmsnorm_forward(y_ref.data(), r_ref.data(), x.data(), w.data(), N, C, 1e-5f);
    expect_close(y, y_ref, 1e-5, 1e-2, "rmsnorm out");
    expect_close(r, r_ref, 1e-6, 0, "rmsnorm rstd");
    auto dx = randv(N * C, 4), dx_ref = dx, dw = randv(C, 5), dw_ref = dw;  // both accumulate
    cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
    ref::rmsnorm_backward(dx_ref.data(), dw_ref.data(), dy.data(), x.data(), w.data(), r_ref.data(), N, C);
    expect_close(dx, dx_ref, 1e-5, 1e-2, "rmsnorm dx");
    expect_close(dw, dw_ref, 1e-5, 1e-2, "rmsnorm dw");
  }
}

TEST(LlamaKernels, SwigluMatchesReference) {
  const int64_t n = 10007;
  auto g = randv(n, 6, 4.0f), u = randv(n, 7), dy = randv(n, 8);
  std::vector<float> y(n), y_ref(n), dg(n), du(n), dg_ref(n), du_ref(n);
  cpu::swiglu_forward(y.data(), g.data(), u.data(), n);
  ref::swiglu_forward(y_ref.data(), g.data(), u.data(), n);
  expect_close(y, y_ref, 1e-5, 1e-2, "swiglu out");
  cpu::swiglu_backward(dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
  ref::swiglu_backward(dg_ref.data(), du_ref.data(), dy.data(), g.data(), u.data(), n);
  expect_close(dg, dg_ref, 1e-5, 1e-2, "swiglu dgate");
  expect_close(du, du_ref, 1e-5, 1e-2, "swiglu dup");
}

TEST(LlamaKernels, RopePackMatchesReferenceForEveryGrouping) {
  for (RopeShape s : {RopeShape{2, 5, 6, 2, 10}, {1, 7, 4, 4, 8}, {3, 3, 5, 1, 6}, {2, 4, 2, 1, 2}}) {
    const int64_t N = s.B * s.T, C = s.H * s.D, Ck = s.KV * s.D;
    auto q = randv(N * C, 9), k = randv(N * Ck, 10), v = randv(N * Ck, 11), d = randv(N * 3 * C, 12);
    const auto table = rope_table(s.T, s.D);
    for (const float* rope : {table.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> qkv(N * 3 * C), qkv_ref(N * 3 * C);
      cpu::rope_pack_forward(qkv.data(), q.data(), k.data(), v.data(), rope, s.B, s.T, s.H, s.KV, s.D);
      ref::rope_pack_forward(qkv_ref.data(), q.data(), k.data(), v.data(), rope, s.B, s.T, s.H, s.KV, s.D);
      expect_close(qkv, qkv_ref, 1e-5, 1e-2, "rope pack");
      std::vector<float> dq(N * C), dk(N * Ck), dv(N * Ck), dq_ref(N * C), dk_ref(N * Ck), dv_ref(N * Ck);
      cpu::rope_pack_backward(dq.data(), dk.data(), dv.data(), d.data(), rope, s.B, s.T, s.H, s.KV, s.D);
      ref::rope_pack_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(), d.data(), rope, s.B, s.T, s.H, s.KV, s.D);
      expect_close(dq, dq_ref, 1e-5, 1e-2, "rope dq");
      expect_close(dk, dk_ref, 1e-5, 1e-2, "rope dk");
      expect_close(dv, dv_ref, 1e-5, 1e-2, "rope dv");
    }
  }
}

TEST(LlamaKernels, RopeIsARotationByEachRowsPosition) {
  // A head of ones at row t: x'[i] = cos - sin, x'[i + D/2] = cos + sin; the norm is kept.
  const int64_t T = 4, D = 6;
  const auto table = rope_table(T, D);
  std::vector<float> q(T * D, 1.0f), k(T * D, 1.0f), v(T * D, 2.0f), qkv(T * 3 * D);
  cpu::rope_pack_forward(qkv.data(), q.data(), k.data(), v.data(), table.data(), 1, T, 1, 1, D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D / 2; ++i) {
      const float c = table[t * D + i], s = table[t * D + D / 2 + i];
      EXPECT_FLOAT_EQ(qkv[t * 3 * D + i], c - s);
      EXPECT_FLOAT_EQ(qkv[t * 3 * D + D / 2 + i], c + s);
      EXPECT_FLOAT_EQ(qkv[t * 3 * D + D + i], c - s);
      EXPECT_FLOAT_EQ(qkv[t * 3 * D + 2 * D + i], 2.0f);
    }
}

TEST(LlamaKernels, ReferenceBackwardsMatchFiniteDifferences) {
  {
    const int64_t N = 4, C = 9;
    auto x = randv(N * C, 13), w = randv(C, 14), R = randv(N * C, 15);
    std::vector<float> y(N * C), r(N), dx(N * C, 0.0f), dw(C, 0.0f);
    auto loss = [&] {
      ref::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5f);
      return dotv(y, R);
    };
    loss();
    ref::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), r.data(), N, C);
    fd_check(x, dx, loss, "rmsnorm dx", 1e-3f);
    fd_check(w, dw, loss, "rmsnorm dw");
  }
  {
    const int64_t n = 40;
    auto g = randv(n, 16, 3.0f), u = randv(n, 17), R = randv(n, 18);
    std::vector<float> y(n), dg(n), du(n);
    auto loss = [&] {
      ref::swiglu_forward(y.data(), g.data(), u.data(), n);
      return dotv(y, R);
    };
    ref::swiglu_backward(dg.data(), du.data(), R.data(), g.data(), u.data(), n);
    fd_check(g, dg, loss, "swiglu dgate", 1e-3f);
    fd_check(u, du, loss, "swiglu dup", 1e-3f);
  }
  {
    const RopeShape s{2, 3, 4, 2, 6};
    const int64_t N = s.B * s.T, C = s.H * s.D, Ck = s.KV * s.D;
    auto q = randv(N * C, 19), k = randv(N * Ck, 20), v = randv(N * Ck, 21), R = randv(N * 3 * C, 22);
    const auto table = rope_table(s.T, s.D);
    std::vector<float> qkv(N * 3 * C), dq(N * C), dk(N * Ck), dv(N * Ck);
    auto loss = [&] {
      ref::rope_pack_forward(qkv.data(), q.data(), k.data(), v.data(), table.data(), s.B, s.T, s.H, s.KV, s.D);
      return dotv(qkv, R);
    };
    ref::rope_pack_backward(dq.data(), dk.data(), dv.data(), R.data(), table.data(), s.B, s.T, s.H, s.KV, s.D);
    fd_check(q, dq, loss, "rope dq");
    fd_check(k, dk, loss, "rope dk");
    fd_check(v, dv, loss, "rope dv");
  }
}

TEST(LlamaKernels, CpuKernelsGiveTheSameBitsOnAnyThreadCount) {
  const int64_t N = 67, C = 200, n = N * C;
  auto x = randv(n, 23), w = randv(C, 24), dy = randv(n, 25), u = randv(n, 26);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> y(n), r(N), dx(n, 0.0f), dw(C, 0.0f), s(n), dg(n), du(n);
    cpu::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-6f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
    cpu::swiglu_forward(s.data(), x.data(), u.data(), n);
    cpu::swiglu_backward(dg.data(), du.data(), dy.data(), x.data(), u.data(), n);
    std::vector<float> all;
    for (const auto* v : {&y, &r, &dx, &dw, &s, &dg, &du}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const auto one = run(1), two = run(2);
  omp_set_num_threads(2);
  EXPECT_EQ(one, two);
}
