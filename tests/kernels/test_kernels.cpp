// Optimized CPU kernels against the reference kernels on odd shapes.
#include <omp.h>

#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

using namespace parallm;
using namespace parallm::kernels;
using parallm::test::expect_close;
using parallm::test::randv;

TEST(Matmul, MatchesReferenceOnOddShapes) {
  for (auto [N, IN, OUT] : {std::tuple{1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {130, 64, 200}}) {
    for (bool with_bias : {false, true}) {
      auto x = randv(N * IN, 1), w = randv(OUT * IN, 2), b = randv(OUT, 3), dy = randv(N * OUT, 4);
      std::vector<float> o1(N * OUT), o2(N * OUT);
      ref::matmul_forward(o1.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, IN, OUT);
      cpu::matmul_forward(o2.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, IN, OUT);
      expect_close(o2, o1, 1e-4, 1e-2, "matmul fwd");
      auto dw1 = randv(OUT * IN, 5), dw2 = dw1, db1 = randv(OUT, 6), db2 = db1;
      std::vector<float> dx1(N * IN), dx2(N * IN);
      ref::matmul_backward(dx1.data(), dw1.data(), with_bias ? db1.data() : nullptr, dy.data(), x.data(), w.data(), N,
                           IN, OUT);
      cpu::matmul_backward(dx2.data(), dw2.data(), with_bias ? db2.data() : nullptr, dy.data(), x.data(), w.data(), N,
                           IN, OUT);
      expect_close(dx2, dx1, 1e-4, 1e-2, "matmul dinp");
      expect_close(dw2, dw1, 1e-4, 1e-2, "matmul dweight (accumulated)");
      expect_close(db2, db1, 1e-4, 1e-2, "matmul dbias (accumulated)");
    }
  }
}

TEST(LayerNorm, MatchesReference) {
  for (auto [N, C] : {std::pair{1, 1}, {5, 7}, {37, 130}, {64, 384}}) {
    for (bool with_bias : {false, true}) {
      auto x = randv(N * C, 10, 2.0f), w = randv(C, 11), b = randv(C, 12), dy = randv(N * C, 13);
      std::vector<float> o1(N * C), o2(N * C), m1(N), m2(N), r1(N), r2(N);
      const float* bp = with_bias ? b.data() : nullptr;
      ref::layernorm_forward(o1.data(), m1.data(), r1.data(), x.data(), w.data(), bp, N, C);
      cpu::layernorm_forward(o2.data(), m2.data(), r2.data(), x.data(), w.data(), bp, N, C);
      expect_close(o2, o1, 1e-4, 1e-3, "ln fwd");
      auto dx1 = randv(N * C, 14), dx2 = dx1, dw1 = randv(C, 15), dw2 = dw1, db1 = randv(C, 16), db2 = db1;
      ref::layernorm_backward(dx1.data(), dw1.data(), with_bias ? db1.data() : nullptr, dy.data(), x.data(), w.data(),
                              m1.data(), r1.data(), N, C);
      cpu::layernorm_backward(dx2.data(), dw2.data(), with_bias ? db2.data() : nullptr, dy.data(), x.data(), w.data(),
                              m2.data(), r2.data(), N, C);
      expect_close(dx2, dx1, 2e-4, 1e-2, "ln dinp");
      expect_close(dw2, dw1, 2e-4, 1e-2, "ln dweight");
      expect_close(db2, db1, 2e-4, 1e-2, "ln dbias");
    }
  }
}

TEST(Gelu, MatchesReferenceBothKinds) {
  for (auto kind : {GeluKind::Exact, GeluKind::Tanh}) {
    for (int64_t n : {1, 7, 4099, 10000}) {
      auto x = randv(n, 20, 3.0f), dy = randv(n, 21);
      x[0] = -12.0f;  // far tails
      if (n > 1) x[1] = 12.0f;
      std::vector<float> o1(n), o2(n), d1(n), d2(n);
      ref::gelu_forward(o1.data(), x.data(), n, kind);
      cpu::gelu_forward(o2.data(), x.data(), n, kind);
      expect_close(o2, o1, kind == GeluKind::Exact ? 1e-4 : 5e-5, 1e-3, "gelu fwd");  // see the grid test below
      ref::gelu_backward(d1.data(), x.data(), dy.data(), n, kind);
      cpu::gelu_backward(d2.data(), x.data(), dy.data(), n, kind);
      expect_close(d2, d1, 1e-4, 1e-3, "gelu bwd");
    }
  }
}

// The exact kind's contract (gelu.h) on a dense grid, against erf in double:
// GELU within 3e-7 * max(1, |x|), relative 1e-4 where Phi >= 1.5e-3 (x >
// -2.97; 1 + erf cancels in the left tail, as in fp32 PyTorch), the derivative
// within 4e-7 absolute (it rounds near 1.1, where an ulp is 1.2e-7), and no
// sign flips. Measured: 1.96e-7, 6.5e-5 and 2.2e-7 with FMA; 2.1e-7, 7.9e-5
// and 2.5e-7 without, as in the sanitizer build. NaN stays NaN; +inf gives +inf.
TEST(Gelu, ExactWithinItsBoundsOfErfInDouble) {
  const int64_t n = 200001;
  std::vector<float> x(n), y(n), d(n), one(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = -10.0f + 20.0f * static_cast<float>(i) / static_cast<float>(n - 1);
  cpu::gelu_forward(y.data(), x.data(), n, GeluKind::Exact);
  cpu::gelu_backward(d.data(), x.data(), one.data(), n, GeluKind::Exact);
  double worst_abs = 0, worst_rel = 0, worst_d = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xv = x[i], phi = 0.5 * (1.0 + std::erf(xv / std::sqrt(2.0)));
    const double g = xv * phi, dg = phi + xv * std::exp(-0.5 * xv * xv) / std::sqrt(2.0 * M_PI);
    ASSERT_TRUE(y[i] == 0.0f || std::signbit(y[i]) == std::signbit(xv)) << "sign at x=" << xv;
    worst_abs = std::max(worst_abs, std::fabs(y[i] - g) / std::max(1.0, std::fabs(xv)));
    if (phi >= 1.5e-3 && std::fabs(xv) > 1e-3) worst_rel = std::max(worst_rel, std::fabs(y[i] - g) / std::fabs(g));
    worst_d = std::max(worst_d, std::fabs(d[i] - dg));
  }
  EXPECT_LE(worst_abs, 3e-7);
  EXPECT_LE(worst_rel, 1e-4);
  EXPECT_LE(worst_d, 4e-7);

  // A chunk's worth of special values among ordinary ones, so the vector path runs.
  std::vector<float> sx(64, 0.5f), sy(64), sd(64);
  sx[3] = std::numeric_limits<float>::quiet_NaN();
  sx[17] = std::numeric_limits<float>::infinity();
  cpu::gelu_forward(sy.data(), sx.data(), 64, GeluKind::Exact);
  cpu::gelu_backward(sd.data(), sx.data(), one.data(), 64, GeluKind::Exact);
  EXPECT_TRUE(std::isnan(sy[3]));
  EXPECT_TRUE(std::isnan(sd[3]));
  EXPECT_EQ(sy[17], std::numeric_limits<float>::infinity());
  EXPECT_NEAR(sy[0], 0.5 * 0.5 * (1.0 + std::erf(0.5 / std::sqrt(2.0))), 1e-7);
}

TEST(Attention, MatchesReferenceWithAndWithoutDropout) {
  const int nt = omp_get_max_threads();
  for (auto [B, T, C, NH] : {std::tuple{1, 1, 4, 1}, {2, 7, 12, 3}, {3, 33, 40, 5}, {1, 64, 64, 2}}) {
    for (float p : {0.0f, 0.3f}) {
      AttnDropout d{p, 77, 5};
      auto qkv = randv(B * T * 3 * C, 30), dy = randv(B * T * C, 31);
      std::vector<float> o1(B * T * C), o2(B * T * C), l1(B * NH * T), l2(B * NH * T);
      std::vector<float> w1(ref::attention_workspace_floats(B, T, C, NH, nt)),
          w2(cpu::attention_workspace_floats(B, T, C, NH, nt));
      ref::attention_forward(o1.data(), l1.data(), qkv.data(), B, T, C, NH, d, w1.data());
      cpu::attention_forward(o2.data(), l2.data(), qkv.data(), B, T, C, NH, d, w2.data());
      expect_close(o2, o1, 1e-4, 1e-2, "attn out");
      expect_close(l2, l1, 1e-5, 1e-2, "attn lse");
      std::vector<float> g1(B * T * 3 * C), g2(B * T * 3 * C, 99.0f);
      ref::attention_backward(g1.data(), dy.data(), qkv.data(), o1.data(), l1.data(), B, T, C, NH, d, w1.data());
      cpu::attention_backward(g2.data(), dy.data(), qkv.data(), o2.data(), l2.data(), B, T, C, NH, d, w2.data());
      expect_close(g2, g1, 2e-4, 1e-2, "attn dqkv");
    }
  }
}

TEST(Classifier, FusedMatchesReferenceAndForwardOnly) {
  const int nt = omp_get_max_threads();
  for (auto [N, C, V] : {std::tuple{1, 3, 2}, {13, 24, 37}, {70, 16, 300}}) {
    auto x = randv(N * C, 40), w = randv(V * C, 41);
    std::vector<int32_t> tgt(N);
    for (int i = 0; i < N; ++i) tgt[i] = (i * 7 + 3) % V;
    std::vector<float> l1(N), l2(N), l3(N), dx1(N * C), dx2(N * C);
    auto dw1 = randv(V * C, 42), dw2 = dw1;
    std::vector<float> w1(ref::classifier_workspace_floats(N, V, nt)), w2(cpu::classifier_workspace_floats(N, V, nt));
    ref::classifier_forward_backward(l1.data(), dx1.data(), dw1.data(), x.data(), w.data(), tgt.data(), N, C, V, 0.25f,
                                     w1.data());
    cpu::classifier_forward_backward(l2.data(), dx2.data(), dw2.data(), x.data(), w.data(), tgt.data(), N, C, V, 0.25f,
                                     w2.data());
    expect_close(l2, l1, 1e-5, 1e-2, "loss");
    expect_close(dx2, dx1, 1e-4, 1e-2, "dx");
    expect_close(dw2, dw1, 1e-4, 1e-2, "dwte");
    cpu::classifier_forward_backward(l3.data(), nullptr, nullptr, x.data(), w.data(), tgt.data(), N, C, V, 1.0f,
                                     w2.data());
    expect_close(l3, l1, 1e-5, 1e-2, "loss (forward only)");
  }
}

TEST(Embedding, MatchesReference) {
  const int64_t B = 3, T = 11, C = 70, V = 9;
  std::vector<int32_t> tok(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (i * 5) % V;
  auto wte = randv(V * C, 50), wpe = randv(T * C, 51), dy = randv(B * T * C, 52);
  std::vector<float> o1(B * T * C), o2(B * T * C);
  ref::embedding_forward(o1.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  cpu::embedding_forward(o2.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  expect_close(o2, o1, 0, 1e-6, "emb fwd");
  auto g1 = randv(V * C, 53), g2 = g1, p1 = randv(T * C, 54), p2 = p1;
  ref::embedding_backward(g1.data(), p1.data(), dy.data(), tok.data(), B, T, C);
  cpu::embedding_backward(g2.data(), p2.data(), dy.data(), tok.data(), B, T, C);
  expect_close(g2, g1, 1e-6, 1e-3, "dwte");
  expect_close(p2, p1, 1e-6, 1e-3, "dwpe");
}

TEST(Elementwise, ResidualScaleAndDropoutMatchReference) {
  const int64_t n = 10007;
  auto a = randv(n, 60), b = randv(n, 61);
  std::vector<float> o1(n), o2(n);
  ref::residual_forward(o1.data(), a.data(), b.data(), n);
  cpu::residual_forward(o2.data(), a.data(), b.data(), n);
  EXPECT_EQ(o1, o2);
  o1 = a;
  o2 = a;
  ref::scale_inplace(o1.data(), n, 0.37f);
  cpu::scale_inplace(o2.data(), n, 0.37f);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(o2[5], a[5] * 0.37f);
  ref::dropout_forward(o1.data(), a.data(), n, 0.25f, 3, 4, 0);
  cpu::dropout_forward(o2.data(), a.data(), n, 0.25f, 3, 4, 0);
  EXPECT_EQ(o1, o2);
  int64_t zeros = std::count(o2.begin(), o2.end(), 0.0f);
  EXPECT_NEAR(double(zeros) / n, 0.25, 0.02);
  ref::dropout_backward(o1.data(), b.data(), n, 0.25f, 3, 4, 0);
  cpu::dropout_backward(o2.data(), b.data(), n, 0.25f, 3, 4, 0);
  EXPECT_EQ(o1, o2);
  // A slice starting at global element `base` (any alignment) draws the slice of the whole mask.
  for (int64_t base : {1, 4, 4099}) {
    std::vector<float> part(n - base);
    cpu::dropout_forward(part.data(), a.data() + base, n - base, 0.25f, 3, 4, base);
    ref::dropout_forward(o1.data(), a.data(), n, 0.25f, 3, 4, 0);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), o1.begin() + base)) << "base " << base;
  }
}

TEST(AdamW, MatchesReferenceAndSumSquaresIsThreadIndependent) {
  const int64_t n = 40000;
  auto w1 = randv(n, 70), g = randv(n, 71), m1 = randv(n, 72, 0.1f), v1 = randv(n, 73, 0.1f);
  for (auto& x : v1) x = std::fabs(x);
  auto w2 = w1, m2 = m1, v2 = v1;
  AdamWParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  p.step = 3;
  p.grad_scale = 0.7f;
  ref::adamw_step(w1.data(), g.data(), m1.data(), v1.data(), n, p);
  cpu::adamw_step(w2.data(), g.data(), m2.data(), v2.data(), n, p);
  expect_close(w2, w1, 1e-5, 1e-2, "param");
  expect_close(m2, m1, 1e-5, 1e-2, "m");
  expect_close(v2, v1, 1e-5, 1e-2, "v");
  // The bf16 copy written in the same pass is the updated weight rounded to
  // nearest even, whatever the offset (an odd one leaves the vector lanes' alignment).
  for (int64_t off : {0, 1}) {
    auto w3 = w2, m3 = m2, v3 = v2, w4 = w2, m4 = m2, v4 = v2;
    std::vector<bfloat16> c3(n), c4(n);
    ref::adamw_step(w3.data() + off, g.data() + off, m3.data() + off, v3.data() + off, n - off, p, c3.data() + off);
    cpu::adamw_step(w4.data() + off, g.data() + off, m4.data() + off, v4.data() + off, n - off, p, c4.data() + off);
    for (int64_t i = off; i < n; ++i) {
      ASSERT_EQ(c3[i].bits, f32_to_bf16(w3[i])) << "ref, element " << i;
      ASSERT_EQ(c4[i].bits, f32_to_bf16(w4[i])) << "cpu, element " << i;
    }
    if (off == 1) {
      EXPECT_EQ(c4[0].bits, 0) << "nothing before the run is written";
    }
    if (off == 0) {
      auto w5 = w2, m5 = m2, v5 = v2;
      cpu::adamw_step(w5.data(), g.data(), m5.data(), v5.data(), n, p);
      EXPECT_EQ(w5, w4) << "the copy does not change the update";
    }
  }
  // Runs: weight decay only where the run asks for it, nothing between runs touched.
  {
    const std::vector<AdamWRun> runs{{0, 0, 0, 100, true}, {103, 103, 103, 57, false}, {170, 170, 170, 31, true}};
    auto w5 = w2, m5 = m2, v5 = v2, w6 = w2, m6 = m2, v6 = v2;
    cpu::adamw_runs(w5.data(), g.data(), m5.data(), v5.data(), runs.data(), 3, p);
    for (const auto& r : runs) {
      auto q = p;
      q.weight_decay = r.decay ? p.weight_decay : 0.0f;
      ref::adamw_step(w6.data() + r.param, g.data() + r.grad, m6.data() + r.state, v6.data() + r.state, r.length, q);
    }
    expect_close(w5, w6, 1e-5, 1e-2, "param (runs)");
    EXPECT_EQ(w5[101], w2[101]);
    EXPECT_EQ(w5[300], w2[300]);
  }
  omp_set_num_threads(1);
  double s1 = cpu::sum_squares(g.data(), n);
  omp_set_num_threads(2);
  double s2 = cpu::sum_squares(g.data(), n);
  EXPECT_EQ(s1, s2);
  EXPECT_NEAR(s1, ref::sum_squares(g.data(), n), 1e-4 * s1);
  // Runs of one buffer: each the one-call sum's bits (an empty run 0).
  const std::vector<int64_t> off{0, 3, n - 1, 2}, cnt{3, n - 4, 1, 0};
  std::vector<double> many(off.size(), -1.0);
  kernels::sum_squares_runs(Device::cpu(), g.data(), off.data(), cnt.data(), 4, many.data());
  for (size_t i = 0; i < off.size(); ++i) EXPECT_EQ(many[i], cpu::sum_squares(g.data() + off[i], cnt[i])) << i;
  EXPECT_EQ(many[3], 0.0);
  // Loss-scaled gradients may square past fp32's range: still finite (only inf or NaN inputs are not).
  std::vector<float> big(1000, 3e19f);
  big[7] = -1e20f;
  const double sb = cpu::sum_squares(big.data(), 1000);
  EXPECT_TRUE(std::isfinite(sb));
  EXPECT_NEAR(sb, 999 * 9e38 + 1e40, 1e-5 * sb);
  big[500] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(cpu::sum_squares(big.data(), 1000)));
  big[500] = std::nanf("");
  EXPECT_FALSE(std::isfinite(cpu::sum_squares(big.data(), 1000)));
}

#include "core/error.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/small_gemm.h"

// Every row remainder of every ISA's tile (up to 8 rows) and column counts
// around its vector widths (4, 8, 16) and tile widths (8, 16, 32).
std::vector<std::tuple<int64_t, int64_t, int64_t>> small_gemm_shapes() {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> s{{9, 70, 33}, {64, 64, 64}, {32, 256, 64}, {32, 64, 256}};
  for (int64_t M = 1; M <= 17; ++M)
    for (int64_t N : {1, 3, 4, 5, 8, 12, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 49})
      s.emplace_back(M, N, M % 3 == 0 ? 1 : 5);
  return s;
}

TEST(SmallGemm, PlainAndTransposedAMatchReferenceOnOddShapes) {
  SCOPED_TRACE(std::string("isa ") + simd::isa_name(simd::isa()));
  for (auto [M, N, K] : small_gemm_shapes()) {
    SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N << " K " << K);
    for (bool acc : {false, true}) {
      const int64_t lda = K + 3, ldb = N + 2, ldc = N + 1;  // strides wider than the matrices
      auto A = randv(M * lda, 80), At = randv(K * (M + 2), 81), B = randv(K * ldb, 82), C0 = randv(M * ldc, 83);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k) At[k * (M + 2) + i] = A[i * lda + k];
      std::vector<float> want = C0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += double(A[i * lda + k]) * B[k * ldb + j];
          want[i * ldc + j] = static_cast<float>((acc ? C0[i * ldc + j] : 0.0) + 0.5 * s);
        }
      auto got = C0, got_t = C0;
      cpu::small_gemm(M, N, K, 0.5f, A.data(), lda, B.data(), ldb, got.data(), ldc, acc);
      cpu::small_gemm_tn(M, N, K, 0.5f, At.data(), M + 2, B.data(), ldb, got_t.data(), ldc, acc);
      // Long sums (K = 256) in fp32 without FMA (baseline) cancel to ~1e-4 of
      // the small elements: judge those against 1% of the largest.
      const double floor = K > 64 ? 1e-2 : 1e-3;
      expect_close(got, want, 1e-4, floor, "small_gemm");
      expect_close(got_t, want, 1e-4, floor, "small_gemm_tn");
    }
  }
}

TEST(SmallGemm, IsaCapFromTheEnvironment) {
  using simd::Isa;
  EXPECT_EQ(simd::cap_isa(Isa::Avx512, nullptr), Isa::Avx512);
  EXPECT_EQ(simd::cap_isa(Isa::Avx512, ""), Isa::Avx512);
  EXPECT_EQ(simd::cap_isa(Isa::Avx512, "avx2"), Isa::Avx2);
  EXPECT_EQ(simd::cap_isa(Isa::Avx512, "baseline"), Isa::Baseline);
  EXPECT_EQ(simd::cap_isa(Isa::Avx2, "avx512"), Isa::Avx2);  // never more than the CPU has
  EXPECT_EQ(simd::cap_isa(Isa::Baseline, "avx2"), Isa::Baseline);
  try {
    simd::cap_isa(Isa::Avx2, "sse9");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PARALLM_ISA='sse9'"), std::string::npos) << e.what();
  }
}

TEST(SmallGemm, TransposeIsExactOnOddShapesAndStrides) {
  // W x W register tiles (W = 16, 8 or 4 floats per ISA) plus ragged edges on both sides.
  for (auto [rows, cols] :
       {std::pair{1, 1}, {4, 4}, {8, 8}, {9, 7}, {16, 16}, {17, 15}, {33, 64}, {256, 64}, {5, 40}, {47, 31}}) {
    const int64_t ld_src = cols + 5, ld_dst = rows + 3;
    auto src = randv(rows * ld_src, 84);
    std::vector<float> dst(cols * ld_dst, -7.0f);
    cpu::transpose(dst.data(), ld_dst, src.data(), ld_src, rows, cols);
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < ld_dst; ++r) {
        const float want = r < rows ? src[r * ld_src + c] : -7.0f;  // padding untouched
        ASSERT_EQ(dst[c * ld_dst + r], want) << rows << "x" << cols << " at (" << r << "," << c << ")";
      }
  }
}

#include "kernels/cpu/gemm.h"

TEST(Gemm, PackedGemmMatchesReferenceForEveryLayoutAndOddShapes) {
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, {7, 33, 5}, {9, 31, 300}, {130, 70, 257}, {40, 300, 600}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f}) {
          const int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
          auto A = randv((ta ? K : M) * lda, 90), B = randv((tb ? N : K) * ldb, 91), C0 = randv(M * ldc, 92);
          std::vector<float> want = C0, got = C0;
          parallm::test::reference_gemm(ta, tb, M, N, K, 0.75, A, lda, B, ldb, beta, want, ldc);
          cpu::gemm(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
          expect_close(got, want, 1e-4, 1e-2, "gemm");
        }
  }
}

TEST(Gemm, PackedGemmIsThreadCountIndependent) {
  const int64_t M = 100, N = 70, K = 5000;
  auto A = randv(K * M, 93), B = randv(K * N, 94);
  std::vector<float> c1(M * N), c2(M * N);
  omp_set_num_threads(1);
  cpu::gemm(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 0.0f, c1.data(), N);
  omp_set_num_threads(2);
  cpu::gemm(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 0.0f, c2.data(), N);
  EXPECT_EQ(c1, c2);
}
