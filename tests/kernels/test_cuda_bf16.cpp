// The bf16 (mixed precision) CUDA kernels against the CPU reference run on the
// same bf16-rounded inputs, on odd shapes: elementwise kernels must equal the
// reference rounded once to bf16; kernels whose outputs are bf16 are judged
// at bf16's resolution (8 bits of mantissa), their fp32 outputs (statistics,
// losses, weight gradients) at fp32's. Skipped, visibly, without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace parallm {
namespace {

using test::Dev;
using test::expect_close;
namespace kc = kernels::cuda;
namespace kr = kernels::ref;

class CudaBf16 : public test::Cuda {};

// Random values already on the bf16 grid, so both sides start from the same numbers.
std::vector<float> randb(int64_t n, uint64_t s, float scale = 1.0f) {
  auto v = test::randv(n, s, scale);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}
std::vector<bfloat16> to_bf(const std::vector<float>& v) {
  std::vector<bfloat16> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i].bits = f32_to_bf16(v[i]);
  return r;
}
std::vector<float> from_bf(const std::vector<bfloat16>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(v[i].bits);
  return r;
}
std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}
Dev<bfloat16> dev_bf(const std::vector<float>& v) {
  return Dev<bfloat16>(to_bf(v));
}
Dev<bfloat16> dev_bf_nan(int64_t n) {
  return Dev<bfloat16>(std::vector<bfloat16>(n, bfloat16{0x7fc0}));
}

// bf16 results: one rounding (2^-9 relative) plus fp32 sums in another order.
// Where an intermediate passes through bf16 before a sum (the bias after the
// product, P before P V, d(logits) before its products), a small result can
// carry the rounding of its large terms: those are judged against a quarter
// to a half of the tensor's largest magnitude (the floor argument).
constexpr double kBf = 1.6e-2;

TEST_F(CudaBf16, ConversionsRoundToNearestEvenLikeTheHost) {
  auto x = test::randv(5003, 1, 10.0f);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-40f;  // subnormal
  x[3] = 3.0e38f;
  Dev<float> gx(x);
  auto gb = dev_bf_nan(5003);
  kc::convert(gb.p(), gx.p(), 5003);
  auto got = gb.back();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i].bits, f32_to_bf16(x[i])) << "element " << i << " = " << x[i];
  Dev<float> back(std::vector<float>(5003, NAN));
  kc::convert(back.p(), gb.p(), 5003);
  EXPECT_EQ(back.back(), from_bf(got));
}

TEST_F(CudaBf16, MatmulMatchesReferenceOnOddShapes) {
  for (auto [N, IN, OUT] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{37, 53, 29}, {1, 7, 5}, {130, 96, 257}, {70, 40, 96}}) {
    for (bool bias : {true, false}) {
      auto x = randb(N * IN, 1), w = randb(OUT * IN, 2), bb = randb(OUT, 3), dy = randb(N * OUT, 4);
      std::vector<float> out(N * OUT), dx(N * IN), dw = test::randv(OUT * IN, 5), db = test::randv(OUT, 6);
      auto dw0 = dw, db0 = db;
      kr::matmul_forward(out.data(), x.data(), w.data(), bias ? bb.data() : nullptr, N, IN, OUT);
      kr::matmul_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dy.data(), x.data(), w.data(), N, IN, OUT);
      auto gx = dev_bf(x), gw = dev_bf(w), gb = dev_bf(bb), gdy = dev_bf(dy);
      auto gout = dev_bf_nan(N * OUT), gdx = dev_bf_nan(N * IN);
      Dev<float> gdw(dw0), gdb(db0);
      kc::matmul_forward(gout.p(), gx.p(), gw.p(), bias ? gb.p() : nullptr, N, IN, OUT);
      kc::matmul_backward(gdx.p(), gdw.p(), bias ? gdb.p() : nullptr, gdy.p(), gx.p(), gw.p(), N, IN, OUT);
      expect_close(from_bf(gout.back()), out, kBf, bias ? 0.5 : 1e-2, "out");
      expect_close(from_bf(gdx.back()), dx, kBf, 1e-2, "dinp");
      expect_close(gdw.back(), dw, 1e-4, 1e-2, "dweight (fp32)");
      if (bias) expect_close(gdb.back(), db, 1e-4, 1e-2, "dbias (fp32)");
    }
  }
}

TEST_F(CudaBf16, MatmulWithResidualMatchesReferenceOnOddShapes) {
  // out = residual + x W^T (+ b) in one GEMM (cuBLASLt, C = residual): the reference's sum, rounded once.
  for (auto [N, IN, OUT] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{37, 53, 29}, {1, 7, 5}, {130, 96, 257}, {64, 256, 64}}) {
    for (bool bias : {true, false}) {
      auto x = randb(N * IN, 21), w = randb(OUT * IN, 22), bb = randb(OUT, 23), r = randb(N * OUT, 24, 4.0f);
      std::vector<float> out(N * OUT);
      kr::matmul_forward(out.data(), x.data(), w.data(), bias ? bb.data() : nullptr, N, IN, OUT);
      for (int64_t i = 0; i < N * OUT; ++i) out[i] += r[i];
      auto gx = dev_bf(x), gw = dev_bf(w), gb = dev_bf(bb), gr = dev_bf(r), gout = dev_bf_nan(N * OUT);
      kc::matmul_forward_residual(gout.p(), gx.p(), gw.p(), bias ? gb.p() : nullptr, gr.p(), N, IN, OUT);
      expect_close(from_bf(gout.back()), out, kBf, bias ? 0.5 : 1e-2, "out");
      const auto rb = from_bf(gr.back());
      for (int64_t i = 0; i < N * OUT; ++i) ASSERT_EQ(rb[i], r[i]) << "the residual is read, not written";
    }
  }
}

TEST_F(CudaBf16, LayerNormMatchesReferenceAndAccumulates) {
  for (auto [N, C] : std::vector<std::pair<int64_t, int64_t>>{{19, 77}, {300, 768}, {1, 3}, {33, 1000}, {37, 40}}) {
    auto x = randb(N * C, 10, 2.0f), w = randb(C, 11), b = randb(C, 12), dy = randb(N * C, 13), dx = randb(N * C, 14);
    std::vector<float> out(N * C), mean(N), rstd(N), dw = test::randv(C, 15), db = test::randv(C, 16);
    Dev<float> gmean(mean), grstd(rstd), gdw(dw), gdb(db);
    auto gx = dev_bf(x), gw = dev_bf(w), gb = dev_bf(b), gdy = dev_bf(dy), gdx = dev_bf(dx), gout = dev_bf_nan(N * C);
    kr::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    kr::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                           C);
    kc::layernorm_forward(gout.p(), gmean.p(), grstd.p(), gx.p(), gw.p(), gb.p(), N, C);
    kc::layernorm_backward(gdx.p(), gdw.p(), gdb.p(), gdy.p(), gx.p(), gw.p(), gmean.p(), grstd.p(), N, C);
    expect_close(from_bf(gout.back()), out, kBf, 1e-2, "out");
    expect_close(gmean.back(), mean, 1e-4, 1e-3, "mean");
    expect_close(grstd.back(), rstd, 1e-4, 1e-3, "rstd");
    expect_close(from_bf(gdx.back()), dx, kBf, 1e-2, "dinp (accumulated)");
    expect_close(gdw.back(), dw, 1e-4, 1e-3, "dweight (fp32)");
    expect_close(gdb.back(), db, 1e-4, 1e-3, "dbias (fp32)");
  }
}

TEST_F(CudaBf16, GeluMatchesReferenceBothKinds) {
  const int64_t n = 1003;
  auto x = randb(n, 20, 3.0f), dy = randb(n, 21);
  for (auto kind : {kernels::GeluKind::Exact, kernels::GeluKind::Tanh}) {
    std::vector<float> out(n), dx(n);
    kr::gelu_forward(out.data(), x.data(), n, kind);
    kr::gelu_backward(dx.data(), x.data(), dy.data(), n, kind);
    auto gx = dev_bf(x), gdy = dev_bf(dy), gout = dev_bf_nan(n), gdx = dev_bf_nan(n);
    kc::gelu_forward(gout.p(), gx.p(), n, kind);
    kc::gelu_backward(gdx.p(), gx.p(), gdy.p(), n, kind);
    expect_close(from_bf(gout.back()), out, 5e-3, 1e-3, "gelu out");
    expect_close(from_bf(gdx.back()), dx, 5e-3, 1e-3, "gelu dinp");
  }
}

// Heads of 64 take fused kernels: without dropout cuDNN's (where built) or
// parallm's own flash kernels, with dropout parallm's (T past one and several
// 64-row blocks, not a multiple of 64); the others the GEMM path. Both fused
// implementations are checked; the default backward of each is bitwise
// repeatable.
TEST_F(CudaBf16, AttentionMatchesReferenceWithAndWithoutDropout) {
  for (auto impl : {kc::AttentionImpl::Own, kc::AttentionImpl::Cudnn}) {
    const auto before = kc::set_attention_impl(impl);
    for (auto [B, T, C, NH] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
             {2, 13, 24, 3}, {1, 1, 8, 2}, {3, 70, 64, 4}, {1, 64, 64, 1}, {2, 200, 128, 2}, {1, 129, 192, 3}}) {
      for (float p : {0.0f, 0.1f}) {
        SCOPED_TRACE(fmt::format("{} B={} T={} C={} NH={} p={}", impl == kc::AttentionImpl::Own ? "own" : "cudnn", B, T,
                                 C, NH, p));
        kernels::AttnDropout drop{p, 77, 5, 3};
        auto qkv = randb(B * T * 3 * C, 30), dy = randb(B * T * C, 31);
        std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
        std::vector<float> ws(kr::attention_workspace_floats(B, T, C, NH, 1));
        kr::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, drop, ws.data());
        kr::attention_backward(dqkv.data(), dy.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, drop,
                               ws.data());
        auto gqkv = dev_bf(qkv), gdy = dev_bf(dy), gout = dev_bf_nan(B * T * C), gdqkv = dev_bf_nan(B * T * 3 * C);
        Dev<float> glse(std::vector<float>(B * NH * T, NAN)),
            gws(std::vector<float>(kc::attention_workspace_floats_bf16(B, T, C, NH, 1)));
        const int64_t calls = kc::cudnn_attention_calls();
        kc::attention_forward(gout.p(), glse.p(), gqkv.p(), B, T, C, NH, drop, gws.p());
        kc::attention_backward(gdqkv.p(), gdy.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH, drop, gws.p());
        // cuDNN serves 64-wide heads without dropout when it is built (T = 1: its backward declines).
        if (impl == kc::AttentionImpl::Cudnn && kc::cudnn_attention_built() && C == 64 * NH && p == 0.0f && T > 1) {
          EXPECT_EQ(kc::cudnn_attention_calls() - calls, 2) << "cuDNN declined the shape (see the warning above)";
        }
        // P and dS pass through bf16 before their products: a few roundings deep.
        expect_close(from_bf(gout.back()), out, 3e-2, 0.25, "attention out");
        expect_close(glse.back(), lse, 1e-5, 1e-2, "attention lse (fp32)");
        expect_close(from_bf(gdqkv.back()), dqkv, 3e-2, 0.25, "attention dqkv");
        // No atomics: a second backward gives the same bits.
        auto first = gdqkv.back();
        kc::attention_backward(gdqkv.p(), gdy.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH, drop, gws.p());
        auto second = gdqkv.back();
        for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i].bits, second[i].bits) << "dqkv " << i;
      }
    }
    kc::set_attention_impl(before);
  }
}

// The flash kernels' dropout masks are the reference's bit for bit. With
// Q = K = 0 every visible key has P = 1 / (i + 1). V one-hot (key j holds 1 in
// column j % 64, only the keys of block kb) makes out[i][c] = P * mask(i, 64kb
// + c) / (1 - p), and dO one-hot (query i in column i % 64, only the queries
// of block kb) makes dV[j][c] = P * mask(64kb + c, j) / (1 - p): each is zero
// exactly where the mask drops. dQ's kernel draws its own tiles: with V and
// dO all e_0 (dP = 1) and K one-hot, dQ[i][c] = scale * P * (mask - D), whose
// kept and dropped values differ by scale * P / (1 - p), checked per element
// against the reference. T and the head stride exercise unaligned Philox blocks.
TEST_F(CudaBf16, FlashAttentionDropoutMasksAreTheReferenceMasks) {
  const int64_t B = 2, T = 131, NH = 2, C = 64 * NH, C3 = 3 * C;
  const kernels::AttnDropout drop{0.3f, 1234, 9, 2, NH + 3};
  struct OwnKernels {  // restored however the test ends
    kc::AttentionImpl before = kc::set_attention_impl(kc::AttentionImpl::Own);
    ~OwnKernels() { kc::set_attention_impl(before); }
  } own;
  auto keep = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    const auto g = static_cast<uint64_t>((drop.global_bh(b, h, NH) * T + i) * T + j);
    return kernels::dropout_keep(drop.p, drop.seed, drop.stream, g);
  };
  auto run_gpu = [&](const std::vector<float>& qkv, const std::vector<float>& dy) {
    auto gqkv = dev_bf(qkv), gdy = dev_bf(dy), gout = dev_bf_nan(B * T * C), gdqkv = dev_bf_nan(B * T * C3);
    Dev<float> glse(std::vector<float>(B * NH * T, NAN)),
        gws(std::vector<float>(kc::attention_workspace_floats_bf16(B, T, C, NH, 1)));
    kc::attention_forward(gout.p(), glse.p(), gqkv.p(), B, T, C, NH, drop, gws.p());
    kc::attention_backward(gdqkv.p(), gdy.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH, drop, gws.p());
    return std::pair{from_bf(gout.back()), from_bf(gdqkv.back())};
  };
  int64_t checked = 0, dropped = 0;
  for (int64_t kb = 0; kb * 64 < T; ++kb) {
    std::vector<float> qkv(B * T * C3, 0.0f), dy(B * T * C, 0.0f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = kb * 64; t < std::min(T, kb * 64 + 64); ++t)
        for (int64_t h = 0; h < NH; ++h) {
          qkv[(b * T + t) * C3 + 2 * C + h * 64 + t % 64] = 1.0f;
          dy[(b * T + t) * C + h * 64 + t % 64] = 1.0f;
        }
    const auto [out, dqkv] = run_gpu(qkv, dy);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t c = 0; c < 64 && kb * 64 + c < T; ++c) {
            const int64_t j = kb * 64 + c;  // out: query i, key j; dV: key i, query j
            const bool o = out[(b * T + i) * C + h * 64 + c] != 0.0f;
            ASSERT_EQ(o, j <= i && keep(b, h, i, j)) << "out b=" << b << " h=" << h << " query " << i << " key " << j;
            const bool dv = dqkv[(b * T + i) * C3 + 2 * C + h * 64 + c] != 0.0f;
            ASSERT_EQ(dv, i <= j && keep(b, h, j, i)) << "dV b=" << b << " h=" << h << " key " << i << " query " << j;
            checked += 2;
            dropped += (j <= i && !keep(b, h, i, j)) + (i <= j && !keep(b, h, j, i));
          }
    std::vector<float> k1(B * T * C3, 0.0f), e0(B * T * C, 0.0f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < NH; ++h) {
          if (t / 64 == kb) k1[(b * T + t) * C3 + C + h * 64 + t % 64] = 1.0f;
          k1[(b * T + t) * C3 + 2 * C + h * 64] = 1.0f;
          e0[(b * T + t) * C + h * 64] = 1.0f;
        }
    std::vector<float> rout(B * T * C), rlse(B * NH * T), rdqkv(B * T * C3);
    std::vector<float> ws(kr::attention_workspace_floats(B, T, C, NH, 1));
    kr::attention_forward(rout.data(), rlse.data(), k1.data(), B, T, C, NH, drop, ws.data());
    kr::attention_backward(rdqkv.data(), e0.data(), k1.data(), rout.data(), rlse.data(), B, T, C, NH, drop, ws.data());
    const auto gdq = run_gpu(k1, e0).second;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t c = 0; c < 64 && kb * 64 + c < T; ++c) {
            const int64_t at = (b * T + i) * C3 + h * 64 + c;
            const double step = 0.125 / (i + 1) / (1.0 - drop.p);  // kept minus dropped
            ASSERT_NEAR(gdq[at], rdqkv[at], 0.2 * step)
                << "dQ b=" << b << " h=" << h << " query " << i << " key " << kb * 64 + c;
          }
  }
  EXPECT_GT(dropped, checked / 8) << "p = 0.3 should drop about 30% of the visible pairs";
}

// GPT-2's attention shape (12 heads of 64, T = 1024): cuDNN's fused attention
// against parallm's flash kernels, both bf16, forward and backward; each
// one's forward also feeds the other's backward (the lse is shared).
TEST_F(CudaBf16, CudnnAttentionMatchesOwnFlashKernelsAtGpt2Shape) {
  if (!kc::cudnn_attention_built()) GTEST_SKIP() << "parallm was built without cuDNN";
  const int64_t B = 2, T = 1024, NH = 12, C = 64 * NH;
  auto qkv = randb(B * T * 3 * C, 40), dy = randb(B * T * C, 41);
  auto gqkv = dev_bf(qkv), gdy = dev_bf(dy);
  Dev<float> gws(std::vector<float>(kc::attention_workspace_floats_bf16(B, T, C, NH, 1)));
  struct Result {
    std::vector<float> out, lse, dqkv;
  };
  auto run = [&](kc::AttentionImpl fwd, kc::AttentionImpl bwd) {
    auto gout = dev_bf_nan(B * T * C), gdqkv = dev_bf_nan(B * T * 3 * C);
    Dev<float> glse(std::vector<float>(B * NH * T, NAN));
    const auto before = kc::set_attention_impl(fwd);
    kc::attention_forward(gout.p(), glse.p(), gqkv.p(), B, T, C, NH, {}, gws.p());
    kc::set_attention_impl(bwd);
    kc::attention_backward(gdqkv.p(), gdy.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH, {}, gws.p());
    kc::set_attention_impl(before);
    return Result{from_bf(gout.back()), glse.back(), from_bf(gdqkv.back())};
  };
  const int64_t calls = kc::cudnn_attention_calls();
  const Result own = run(kc::AttentionImpl::Own, kc::AttentionImpl::Own);
  const Result dnn = run(kc::AttentionImpl::Cudnn, kc::AttentionImpl::Cudnn);
  ASSERT_EQ(kc::cudnn_attention_calls() - calls, 2) << "cuDNN declined the shape (see the warning above)";
  expect_close(dnn.out, own.out, 2e-2, 3e-2, "cudnn vs own: out");
  expect_close(dnn.lse, own.lse, 1e-4, 1e-2, "cudnn vs own: lse");
  expect_close(dnn.dqkv, own.dqkv, 2e-2, 3e-2, "cudnn vs own: dqkv");
  const Result mixed = run(kc::AttentionImpl::Own, kc::AttentionImpl::Cudnn);
  expect_close(mixed.dqkv, own.dqkv, 2e-2, 3e-2, "own forward, cudnn backward: dqkv");
  const Result fast = run(kc::AttentionImpl::Cudnn, kc::AttentionImpl::CudnnFast);  // the fp32 dQ accumulator
  expect_close(fast.dqkv, own.dqkv, 2e-2, 3e-2, "cudnn forward, cudnn-fast backward: dqkv");
}

TEST_F(CudaBf16, ClassifierMatchesReferenceInOneChunkAndMany) {
  // Rows read 16 bytes at a time (V = 5000, 50304, 270000) and one element at a time (V = 67).
  for (auto [N, C, V] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {23, 16, 67}, {260, 8, 270000}, {70, 24, 5000}, {37, 24, 50304}}) {
    auto x = randb(N * C, 40), wte = randb(V * C, 41, 0.5f);
    std::vector<int32_t> tgt(N);
    for (int64_t i = 0; i < N; ++i) tgt[i] = static_cast<int32_t>((i * 7919) % V);
    std::vector<float> losses(N), dx(N * C), dwte = test::randv(V * C, 42);
    std::vector<float> ws(kr::classifier_workspace_floats(N, V, 1));
    auto gx = dev_bf(x), gwte = dev_bf(wte), gdx = dev_bf_nan(N * C);
    Dev<float> gdwte(dwte), glosses(std::vector<float>(N, NAN)),
        gws(std::vector<float>(kc::classifier_workspace_floats_bf16(N, V, 1)));
    Dev<int32_t> gtgt(tgt);
    kr::classifier_forward_backward(losses.data(), dx.data(), dwte.data(), x.data(), wte.data(), tgt.data(), N, C, V,
                                    0.25f, ws.data());
    kc::classifier_forward_backward(glosses.p(), gdx.p(), gdwte.p(), gx.p(), gwte.p(), gtgt.p(), N, C, V, 0.25f,
                                    gws.p());
    // The chunk's logits are bf16 (as under autocast): the losses are those of
    // the reference logits rounded once, in fp32 arithmetic.
    std::vector<float> logits(N * V), want(N * V);
    kr::classifier_logits(want.data(), x.data(), wte.data(), N, C, V);
    std::vector<float> lossb(N);
    for (int64_t i = 0; i < N; ++i) {
      double mx = -1e30, sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(bf16_to_f32(f32_to_bf16(want[i * V + v]))));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(bf16_to_f32(f32_to_bf16(want[i * V + v]))) - mx);
      lossb[i] = static_cast<float>(mx + std::log(sum) - bf16_to_f32(f32_to_bf16(want[i * V + tgt[i]])));
    }
    expect_close(glosses.back(), lossb, 2e-4, 1e-3, "losses (fp32, of bf16 logits)");
    expect_close(glosses.back(), losses, 1e-2, 1e-3, "losses against fp32 logits");
    expect_close(from_bf(gdx.back()), dx, 3e-2, 0.25, "dx");
    expect_close(gdwte.back(), dwte, 1e-2, 0.1, "dwte (fp32)");
    Dev<float> glogits(logits);
    kc::classifier_logits(glogits.p(), gx.p(), gwte.p(), N, C, V);
    // Exact products of bf16 values, summed in fp32 in another order (tensor cores): an error of the size of the
    // terms' rounding, judged against a tenth of the tensor's scale.
    expect_close(glogits.back(), want, 1e-5, 0.1, "logits (fp32)");
  }
}

TEST_F(CudaBf16, EmbeddingMatchesReference) {
  const int64_t B = 3, T = 7, C = 45, V = 11;
  std::vector<int32_t> tok(B * T);
  for (int64_t i = 0; i < B * T; ++i) tok[i] = static_cast<int32_t>((i * i + 3) % V);  // repeated tokens
  auto wte = randb(V * C, 50), wpe = randb(T * C, 51), dy = randb(B * T * C, 52);
  std::vector<float> out(B * T * C), dwte = test::randv(V * C, 53), dwpe = test::randv(T * C, 54);
  Dev<int32_t> gtok(tok);
  auto gwte = dev_bf(wte), gwpe = dev_bf(wpe), gdy = dev_bf(dy), gout = dev_bf_nan(B * T * C);
  Dev<float> gdwte(dwte), gdwpe(dwpe);
  kr::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  kr::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), B, T, C);
  kc::embedding_forward(gout.p(), gtok.p(), gwte.p(), gwpe.p(), B, T, C);
  kc::embedding_backward(gdwte.p(), gdwpe.p(), gdy.p(), gtok.p(), B, T, C);
  EXPECT_EQ(from_bf(gout.back()), rounded(out));
  expect_close(gdwte.back(), dwte, 1e-5, 1e-3, "dwte (fp32)");
  expect_close(gdwpe.back(), dwpe, 1e-5, 1e-3, "dwpe (fp32)");
}

TEST_F(CudaBf16, ResidualAndDropoutEqualTheReferenceRoundedOnce) {
  const int64_t n = 4099;
  auto a = randb(n, 60), b = randb(n, 61);
  std::vector<float> sum(n), drop(n), ddrop(n);
  kr::residual_forward(sum.data(), a.data(), b.data(), n);
  kr::dropout_forward(drop.data(), a.data(), n, 0.3f, 9, 4, 1000);
  kr::dropout_backward(ddrop.data(), b.data(), n, 0.3f, 9, 4, 1000);
  auto ga = dev_bf(a), gb = dev_bf(b), gsum = dev_bf_nan(n), gdrop = dev_bf_nan(n), gddrop = dev_bf_nan(n);
  kc::residual_forward(gsum.p(), ga.p(), gb.p(), n);
  kc::dropout_forward(gdrop.p(), ga.p(), n, 0.3f, 9, 4, 1000);
  kc::dropout_backward(gddrop.p(), gb.p(), n, 0.3f, 9, 4, 1000);
  EXPECT_EQ(from_bf(gsum.back()), rounded(sum));
  EXPECT_EQ(from_bf(gdrop.back()), rounded(drop)) << "dropout masks differ from the CPU's";
  EXPECT_EQ(from_bf(gddrop.back()), rounded(ddrop));
}

}  // namespace
}  // namespace parallm
