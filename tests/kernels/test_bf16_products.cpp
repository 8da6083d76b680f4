// bf16 products on the CPU (train.dtype=bf16 there): the conversion rounds as
// core's f32_to_bf16 does, and every product equals the exact product of the
// bf16-rounded operands up to fp32 accumulation (1e-4), which rounding the
// operands differently or not at all (about 4e-3) would fail. They skip on a
// CPU without bf16 matrix hardware.
#include <omp.h>

#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/classifier.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

using namespace parallm;
using namespace parallm::kernels;
using parallm::test::expect_close;
using parallm::test::randv;

namespace {
#define SKIP_WITHOUT_BF16()       \
  if (!bf16_products_supported()) \
  GTEST_SKIP() << "no bf16 matrix hardware here (oneDNN offers \"" << bf16_products_impl() << "\")"

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}
std::vector<bfloat16> to_b(const std::vector<float>& v) {
  std::vector<bfloat16> b(v.size());
  cpu::to_bf16(b.data(), v.data(), 1, static_cast<int64_t>(v.size()), static_cast<int64_t>(v.size()));
  return b;
}
}  // namespace

TEST(Bf16Products, ConversionRoundsToNearestEvenLikeCore) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = randv(10007, 1, 3.0f);
  for (float s : {0.0f, -0.0f, 1.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-40f, 3.4e38f})
    v.push_back(s);
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7fffffu}) {  // ties to even both ways, just below
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  // A strided block: 3 rows of 5 out of rows of 7.
  std::vector<bfloat16> dense(15);
  cpu::to_bf16(dense.data(), v.data(), 3, 5, 7);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(dense[r * 5 + c].bits, f32_to_bf16(v[r * 7 + c])) << r << "," << c;
  const std::vector<bfloat16> b = to_b(v);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(b[i].bits, f32_to_bf16(v[i])) << "element " << i << " = " << v[i];
}

TEST(Bf16Products, GemmEqualsExactProductOfRoundedOperandsForEveryLayout) {
  SKIP_WITHOUT_BF16();
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, {7, 33, 5}, {9, 31, 300}, {130, 70, 257}, {40, 300, 600}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f}) {
          const int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
          auto A = randv((ta ? K : M) * lda, 90), B = randv((tb ? N : K) * ldb, 91), C0 = randv(M * ldc, 92);
          const auto Ar = rounded(A), Br = rounded(B);
          std::vector<float> want = C0, got = C0, got_b = C0;
          parallm::test::reference_gemm(ta, tb, M, N, K, 1.0, Ar, lda, Br, ldb, beta, want, ldc);
          cpu::sgemm_bf16(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
          expect_close(got, want, 1e-4, 1e-2, "sgemm_bf16");
          // The bf16-operand entry point on dense operands.
          std::vector<bfloat16> a((ta ? K : M) * (ta ? M : K)), b((tb ? N : K) * (tb ? K : N));
          cpu::to_bf16(a.data(), A.data(), ta ? K : M, ta ? M : K, lda);
          cpu::to_bf16(b.data(), B.data(), tb ? N : K, tb ? K : N, ldb);
          gemm_bf16(ta, tb, M, N, K, a.data(), b.data(), beta, got_b.data(), ldc);
          EXPECT_EQ(got_b, got) << M << "x" << N << "x" << K;
        }
  }
}

TEST(Bf16Products, GemmIsRepeatableAndRefusesOtherBetas) {
  SKIP_WITHOUT_BF16();
  const int64_t M = 100, N = 70, K = 5000;
  auto A = randv(K * M, 93), B = randv(K * N, 94);
  std::vector<float> c1(M * N), c2(M * N);
  cpu::sgemm_bf16(true, false, M, N, K, A.data(), M, B.data(), N, 0.0f, c1.data(), N);
  cpu::sgemm_bf16(true, false, M, N, K, A.data(), M, B.data(), N, 0.0f, c2.data(), N);
  EXPECT_EQ(c1, c2);
  EXPECT_THROW(cpu::sgemm_bf16(true, false, M, N, K, A.data(), M, B.data(), N, 0.5f, c2.data(), N), Error);
}

TEST(Bf16Products, LinearLayerEqualsReferenceOnRoundedOperands) {
  SKIP_WITHOUT_BF16();
  for (auto [N, IN, OUT] : {std::tuple{1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {130, 64, 200}}) {
    for (bool with_bias : {false, true}) {
      auto x = randv(N * IN, 1), w = randv(OUT * IN, 2), b = randv(OUT, 3), dy = randv(N * OUT, 4);
      const auto xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
      std::vector<float> o1(N * OUT), o2(N * OUT);
      ref::matmul_forward(o1.data(), xr.data(), wr.data(), with_bias ? b.data() : nullptr, N, IN, OUT);
      cpu::matmul_forward_bf16p(o2.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, IN, OUT);
      expect_close(o2, o1, 1e-4, 1e-2, "bf16 matmul fwd");
      auto dw1 = randv(OUT * IN, 5), dw2 = dw1, db1 = randv(OUT, 6), db2 = db1;
      std::vector<float> dx1(N * IN), dx2(N * IN);
      ref::matmul_backward(dx1.data(), dw1.data(), with_bias ? db1.data() : nullptr, dyr.data(), xr.data(), wr.data(),
                           N, IN, OUT);
      // The bias gradient sums the fp32 dout, not the rounded one.
      std::vector<float> db_want = db1;
      if (with_bias) {
        db_want = randv(OUT, 6);
        for (int n = 0; n < N; ++n)
          for (int o = 0; o < OUT; ++o) db_want[o] += dy[n * OUT + o];
      }
      cpu::matmul_backward_bf16p(dx2.data(), dw2.data(), with_bias ? db2.data() : nullptr, dy.data(), x.data(),
                                 w.data(), N, IN, OUT);
      expect_close(dx2, dx1, 1e-4, 1e-2, "bf16 matmul dinp");
      expect_close(dw2, dw1, 1e-4, 1e-2, "bf16 matmul dweight (accumulated)");
      expect_close(db2, db_want, 1e-4, 1e-2, "bf16 matmul dbias (accumulated)");
      // Without dinp (the first layer's input needs none).
      auto dw3 = randv(OUT * IN, 5);
      cpu::matmul_backward_bf16p(nullptr, dw3.data(), nullptr, dy.data(), x.data(), w.data(), N, IN, OUT);
      expect_close(dw3, dw1, 1e-4, 1e-2, "bf16 matmul dweight without dinp");
    }
  }
}

TEST(Bf16Products, ClassifierMatchesReferenceAtBf16Resolution) {
  SKIP_WITHOUT_BF16();
  const int nt = omp_get_max_threads();
  // The last case has a GPT-2 vocabulary: 333-row chunks, so 400 rows take two.
  for (auto [N, C, V] : {std::tuple{1, 3, 2}, {13, 24, 37}, {70, 16, 300}, {400, 4, 50304}}) {
    auto x = rounded(randv(N * C, 40)), w = rounded(randv(V * C, 41));
    std::vector<int32_t> tgt(N);
    for (int i = 0; i < N; ++i) tgt[i] = (i * 7 + 3) % V;
    std::vector<float> l1(N), l2(N), l3(N), lg1(N * V), lg2(N * V), dx1(N * C), dx2(N * C);
    auto dw1 = randv(V * C, 42), dw2 = dw1;
    std::vector<float> w1(ref::classifier_workspace_floats(N, V, nt)), w2(cpu::classifier_workspace_floats(N, V, nt));
    ref::classifier_forward_backward(l1.data(), dx1.data(), dw1.data(), x.data(), w.data(), tgt.data(), N, C, V, 0.25f,
                                     w1.data());
    cpu::classifier_forward_backward_bf16p(l2.data(), dx2.data(), dw2.data(), x.data(), w.data(), tgt.data(), N, C, V,
                                           0.25f, w2.data());
    // Logits from exactly rounded operands: the losses are fp32-exact.
    expect_close(l2, l1, 1e-5, 1e-2, "loss");
    // d(logits) is rounded to bf16 before the two gradient products: the
    // reference rounds it too (a 1-ulp difference in the fp32 softmax can
    // still round an element the other way, which over 50k classes adds up
    // to about 1e-3, hence 3e-3; a wrong chunk or layout would be off by O(1)).
    std::vector<float> dl(N * V);
    for (int n = 0; n < N; ++n) {
      std::vector<double> l(V);
      double mx = -1e300, sum = 0;
      for (int v = 0; v < V; ++v) {
        for (int c = 0; c < C; ++c) l[v] += double(x[n * C + c]) * w[v * C + c];
        mx = std::max(mx, l[v]);
      }
      for (int v = 0; v < V; ++v) sum += std::exp(l[v] - mx);
      for (int v = 0; v < V; ++v)
        dl[n * V + v] = bf16_to_f32(
            f32_to_bf16(static_cast<float>(0.25 * (std::exp(l[v] - mx) / sum - (v == tgt[n] ? 1.0 : 0.0)))));
    }
    std::vector<float> dx_want(N * C), dw_want = randv(V * C, 42);
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < V; ++v)
        for (int c = 0; c < C; ++c) {
          dx_want[n * C + c] += dl[n * V + v] * w[v * C + c];
          dw_want[v * C + c] += dl[n * V + v] * x[n * C + c];
        }
    expect_close(dx2, dx_want, 3e-3, 1e-2, "dx");
    expect_close(dw2, dw_want, 3e-3, 1e-2, "dwte");
    expect_close(dx2, dx1, 0.1, 0.1, "dx against fp32");
    cpu::classifier_forward_backward_bf16p(l3.data(), nullptr, nullptr, x.data(), w.data(), tgt.data(), N, C, V, 1.0f,
                                           w2.data());
    expect_close(l3, l1, 1e-5, 1e-2, "loss (forward only)");
    ref::classifier_logits(lg1.data(), x.data(), w.data(), N, C, V);
    cpu::classifier_logits_bf16p(lg2.data(), x.data(), w.data(), N, C, V);
    expect_close(lg2, lg1, 1e-4, 1e-2, "logits");
  }
}

TEST(Bf16Products, OpsTableSwapsOnlyTheProducts) {
  SKIP_WITHOUT_BF16();
  const Ops& f = ops_for(Device::cpu());
  const Ops& b = cpu_bf16_product_ops();
  EXPECT_NE(b.matmul_forward, f.matmul_forward);
  EXPECT_NE(b.matmul_backward, f.matmul_backward);
  EXPECT_NE(b.classifier_forward_backward, f.classifier_forward_backward);
  EXPECT_NE(b.classifier_logits, f.classifier_logits);
  EXPECT_EQ(b.layernorm_forward, f.layernorm_forward);
  EXPECT_EQ(b.attention_backward, f.attention_backward);
  EXPECT_EQ(b.adamw_runs, f.adamw_runs);
}

TEST(Bf16Products, CopyScopeServesCoveredOperandsBitwiseAndOnlyThose) {
  // Lookup: wholly inside the range, at a float boundary, innermost first.
  std::vector<float> base(100);
  std::vector<bfloat16> copy(100), inner(10);
  EXPECT_EQ(Bf16CopyScope::find(base.data(), 1), nullptr);
  {
    Bf16CopyScope s(base.data(), copy.data(), 100);
    EXPECT_EQ(Bf16CopyScope::find(base.data(), 100), copy.data());
    EXPECT_EQ(Bf16CopyScope::find(base.data() + 40, 60), copy.data() + 40);
    EXPECT_EQ(Bf16CopyScope::find(base.data() + 40, 61), nullptr);  // runs past the end
    EXPECT_EQ(Bf16CopyScope::find(base.data() + 100, 1), nullptr);
    const float* misaligned = reinterpret_cast<const float*>(reinterpret_cast<const char*>(base.data()) + 2);
    EXPECT_EQ(Bf16CopyScope::find(misaligned, 1), nullptr);
    {
      Bf16CopyScope t(base.data() + 10, inner.data(), 10);
      EXPECT_EQ(Bf16CopyScope::find(base.data() + 12, 3), inner.data() + 2);
      EXPECT_EQ(Bf16CopyScope::find(base.data() + 5, 3), copy.data() + 5);  // the outer one
    }
    EXPECT_EQ(Bf16CopyScope::find(base.data() + 12, 3), copy.data() + 12);
  }
  EXPECT_EQ(Bf16CopyScope::find(base.data(), 1), nullptr);

  SKIP_WITHOUT_BF16();
  // A linear layer and the classifier whose weights sit in a "parameter"
  // buffer: with its exact copy installed, bitwise the results of converting;
  // with a copy of other values, those values are what the products read.
  const int N = 37, IN = 48, OUT = 80, V = 300;
  auto params = randv(OUT * IN + V * IN, 50);
  const float* w = params.data();
  const float* wte = params.data() + OUT * IN;
  auto x = randv(N * IN, 51), dy = randv(N * OUT, 52);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 5 + 1) % V;
  std::vector<float> ws(cpu::classifier_workspace_floats(N, V, omp_get_max_threads()));
  struct Out {
    std::vector<float> y, dx, dw, loss, cdx, cdw, logits;
  };
  auto run = [&] {
    Out o{std::vector<float>(N * OUT), std::vector<float>(N * IN), std::vector<float>(OUT * IN), std::vector<float>(N),
          std::vector<float>(N * IN),  std::vector<float>(V * IN), std::vector<float>(N * V)};
    cpu::matmul_forward_bf16p(o.y.data(), x.data(), w, nullptr, N, IN, OUT);
    cpu::matmul_backward_bf16p(o.dx.data(), o.dw.data(), nullptr, dy.data(), x.data(), w, N, IN, OUT);
    cpu::classifier_forward_backward_bf16p(o.loss.data(), o.cdx.data(), o.cdw.data(), x.data(), wte, tgt.data(), N, IN,
                                           V, 1.0f / N, ws.data());
    cpu::classifier_logits_bf16p(o.logits.data(), x.data(), wte, N, IN, V);
    return o;
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  const Out plain = run();
  {
    const std::vector<bfloat16> exact = to_b(params);
    Bf16CopyScope s(params.data(), exact.data(), static_cast<int64_t>(params.size()));
    const Out o = run();
    EXPECT_TRUE(same(o.y, plain.y) && same(o.dx, plain.dx) && same(o.dw, plain.dw));
    EXPECT_TRUE(same(o.loss, plain.loss) && same(o.cdx, plain.cdx) && same(o.cdw, plain.cdw));
    EXPECT_TRUE(same(o.logits, plain.logits));
  }
  {
    // The copy holds the weights halved (exact in bf16): outputs through them halve.
    auto half = params;
    for (float& v : half) v = bf16_to_f32(f32_to_bf16(v)) * 0.5f;
    const std::vector<bfloat16> h = to_b(half);
    Bf16CopyScope s(params.data(), h.data(), static_cast<int64_t>(params.size()));
    const Out o = run();
    for (size_t i = 0; i < o.y.size(); ++i) ASSERT_EQ(o.y[i], 0.5f * plain.y[i]) << i;
    for (size_t i = 0; i < o.dx.size(); ++i) ASSERT_EQ(o.dx[i], 0.5f * plain.dx[i]) << i;
    EXPECT_TRUE(same(o.dw, plain.dw));  // x and dy are not in the buffer
    for (size_t i = 0; i < o.logits.size(); ++i) ASSERT_EQ(o.logits[i], 0.5f * plain.logits[i]) << i;
  }
}
