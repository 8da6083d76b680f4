// The CUDA vocabulary-parallel kernels, fp32 and bf16, against the CPU ones on
// odd shapes: a rank's rows starting past 0, padded or all-padded columns,
// tokens and targets inside and outside the rank's rows, rows long enough for
// the 16-byte loads and for several threads; the embedding backward bitwise
// repeatable. Without a GPU every test skips itself, saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/gpu.h"
#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "kernels/vocab_parallel.h"

namespace parallm {
namespace {

using test::Cuda;
using test::Dev;
using test::expect_close;
using test::randv;
namespace kc = kernels::cuda;
namespace kcpu = kernels::cpu;

std::vector<float> rounded(std::vector<float> v) {
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

// Tokens in [0, 50), some in the rank's rows [22, 22 + vn), with repeats.
std::vector<int32_t> tokens(int64_t n) {
  std::vector<int32_t> tok(n);
  for (int64_t i = 0; i < n; ++i) tok[i] = static_cast<int32_t>((i * i * 5 + 3) % 50);
  for (int64_t i = 0; i < n; i += 7) tok[i] = 24;  // a longer run of one token
  return tok;
}

TEST(CudaStubs, VocabParallelSayCudaWasNotBuilt) {
  if (gpu::built()) GTEST_SKIP() << "CUDA is built";
  try {
    kc::xent_vp_losses(nullptr, nullptr, nullptr, 1);
    FAIL() << "no error";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("xent_vp_losses"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA was not built"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kc::vp_embedding_forward(static_cast<bfloat16*>(nullptr), nullptr, nullptr, nullptr, 1, 1, 1, 0, 1),
               CudaError);
}

// An fp32 sum of n terms taken in two orders differs by at most n 2^-23 times the sum of the terms' magnitudes
// (each addition rounds by at most 2^-24 of a partial sum, which that sum bounds): the bound for dwpe, whose
// elements are p0 plus B terms of N(0, 1) and so sometimes cancel to near zero, where a tolerance relative to the
// result (1e-5, with a floor of 1e-3 of the largest) failed on the H200 at 3.28e-5 without anything wrong.
void expect_within_sum_bound(const std::vector<float>& got, const std::vector<float>& want,
                             const std::vector<double>& magnitude, int64_t terms, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = static_cast<double>(terms) * 0x1p-23 * magnitude[i] + 1e-30;
    const double e = std::fabs(double(got[i]) - want[i]) / bound;
    if (e > worst) {
      worst = e;
      wi = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": worst at " << wi << " got " << got[wi] << " want " << want[wi] << ", " << worst
                        << " times the bound";
}

TEST_F(Cuda, VpEmbeddingMatchesCpuAndIsDeterministic) {
  const int64_t v0 = 22, vn = 11;
  for (auto [B, T, C] : {std::tuple<int64_t, int64_t, int64_t>{3, 7, 45}, {4, 300, 200}}) {
    const auto tok = tokens(B * T);
    const auto wte = randv(vn * C, 70), wpe = randv(T * C, 71), dy = randv(B * T * C, 72);
    const auto g0 = randv(vn * C, 73), p0 = randv(T * C, 74);
    Dev<int32_t> gtok(tok);
    Dev<float> gwte(wte), gwpe(wpe), gdy(dy);
    for (bool with_wpe : {true, false}) {
      SCOPED_TRACE("C = " + std::to_string(C) + (with_wpe ? ", with wpe" : ", without wpe"));
      std::vector<float> out(B * T * C), g = g0, p = p0;
      kcpu::vp_embedding_forward(out.data(), tok.data(), wte.data(), with_wpe ? wpe.data() : nullptr, B, T, C, v0, vn);
      kcpu::vp_embedding_backward(g.data(), with_wpe ? p.data() : nullptr, dy.data(), tok.data(), B, T, C, v0, vn);
      Dev<float> gout(std::vector<float>(B * T * C, NAN)), gg(g0), gp(p0), gg2(g0), gp2(p0);
      kc::vp_embedding_forward(gout.p(), gtok.p(), gwte.p(), with_wpe ? gwpe.p() : nullptr, B, T, C, v0, vn);
      kc::vp_embedding_backward(gg.p(), with_wpe ? gp.p() : nullptr, gdy.p(), gtok.p(), B, T, C, v0, vn);
      EXPECT_EQ(gout.back(), out) << "embedding out";
      // fp32 sums of up to ~400 terms in another order than the CPU's.
      expect_close(gg.back(), g, 1e-4, 1e-2, "dwte");
      if (with_wpe) {
        std::vector<double> mag(p0.begin(), p0.end());  // |p0| + the sum of |dy| over the batch, per element
        for (auto& m : mag) m = std::fabs(m);
        for (int64_t i = 0; i < B * T * C; ++i) mag[static_cast<size_t>(i % (T * C))] += std::fabs(dy[i]);
        expect_within_sum_bound(gp.back(), p, mag, B + 1, "dwpe");
      } else
        EXPECT_EQ(gp.back(), p0) << "dwpe written though not given";
      kc::vp_embedding_backward(gg2.p(), with_wpe ? gp2.p() : nullptr, gdy.p(), gtok.p(), B, T, C, v0, vn);
      EXPECT_EQ(gg.back(), gg2.back()) << "vp_embedding_backward is not bitwise repeatable";
    }
  }
}

TEST_F(Cuda, VpEmbeddingBf16MatchesCpu) {
  const int64_t B = 3, T = 7, C = 45, v0 = 22, vn = 11;
  const auto tok = tokens(B * T);
  const auto wte = rounded(randv(vn * C, 75)), wpe = rounded(randv(T * C, 76)), dy = rounded(randv(B * T * C, 77));
  const auto g0 = randv(vn * C, 78), p0 = randv(T * C, 79);
  std::vector<float> out(B * T * C), g = g0, p = p0;
  kcpu::vp_embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, v0, vn);
  kcpu::vp_embedding_backward(g.data(), p.data(), dy.data(), tok.data(), B, T, C, v0, vn);
  Dev<int32_t> gtok(tok);
  Dev<bfloat16> gwte(to_bf(wte)), gwpe(to_bf(wpe)), gdy(to_bf(dy)),
      gout(std::vector<bfloat16>(B * T * C, bfloat16{0x7fc0}));
  Dev<float> gg(g0), gp(p0);
  kc::vp_embedding_forward(gout.p(), gtok.p(), gwte.p(), gwpe.p(), B, T, C, v0, vn);
  kc::vp_embedding_backward(gg.p(), gp.p(), gdy.p(), gtok.p(), B, T, C, v0, vn);
  EXPECT_EQ(from_bf(gout.back()), rounded(out));
  expect_close(gg.back(), g, 1e-5, 1e-3, "dwte (fp32)");
  expect_close(gp.back(), p, 1e-5, 1e-3, "dwpe (fp32)");
}

// The three steps and d(logits), fp32 and bf16, with this rank's statistics
// combined with a made-up other rank's (the group's all-reduces).
TEST_F(Cuda, XentVpStepsMatchCpu) {
  const int64_t v0 = 22;
  const float dloss = 0.3f;
  for (auto [N, vn] : {std::tuple<int64_t, int64_t>{7, 11}, {33, 12}, {9, 1001}, {5, 2048}}) {
    for (int64_t valid : {vn, int64_t{5}, int64_t{0}}) {
      SCOPED_TRACE("N = " + std::to_string(N) + ", vn = " + std::to_string(vn) + ", valid = " + std::to_string(valid));
      const auto logits = randv(N * vn, 80, 3.0f);
      std::vector<int32_t> tgt(N);
      for (int64_t i = 0; i < N; ++i) tgt[i] = static_cast<int32_t>(i % 3 == 2 ? i : v0 + (i * 7) % vn);
      Dev<float> glog(logits);
      Dev<int32_t> gtgt(tgt);

      std::vector<float> mx(N);
      kcpu::xent_vp_local_max(mx.data(), logits.data(), N, vn, valid);
      Dev<float> gmx(std::vector<float>(N, NAN));
      kc::xent_vp_local_max(gmx.p(), glog.p(), N, vn, valid);
      EXPECT_EQ(gmx.back(), mx) << "local max";
      for (int64_t i = 0; i < N; ++i) mx[i] = std::max(mx[i], 0.5f * static_cast<float>(i % 3));
      Dev<float> gmx2(mx);

      std::vector<float> sums(2 * N);
      kcpu::xent_vp_exp_sums(sums.data(), logits.data(), mx.data(), tgt.data(), N, vn, valid, v0);
      Dev<float> gsums(std::vector<float>(2 * N, NAN));
      kc::xent_vp_exp_sums(gsums.p(), glog.p(), gmx2.p(), gtgt.p(), N, vn, valid, v0);
      const auto got_sums = gsums.back();
      expect_close(std::vector<float>(got_sums.begin(), got_sums.begin() + N),
                   std::vector<float>(sums.begin(), sums.begin() + N), 1e-5, 0, "exp sums");
      EXPECT_EQ(std::vector<float>(got_sums.begin() + N, got_sums.end()),
                std::vector<float>(sums.begin() + N, sums.end()))
          << "target logits";

      // The group's sums: this rank's and another's share.
      for (int64_t i = 0; i < N; ++i) sums[i] += 1.5f;
      Dev<float> gsums2(sums);
      std::vector<float> losses(N);
      kcpu::xent_vp_losses(losses.data(), mx.data(), sums.data(), N);
      Dev<float> glosses(std::vector<float>(N, NAN));
      kc::xent_vp_losses(glosses.p(), gmx2.p(), gsums2.p(), N);
      // logf here and there may differ by an ulp, and log(se) + mx rounds to
      // the grid of mx (up to ~10) before the target logit is taken off.
      expect_close(glosses.back(), losses, 2e-6, 0.1, "losses");

      std::vector<float> d(N * vn);
      kcpu::xent_vp_grad(d.data(), logits.data(), mx.data(), sums.data(), tgt.data(), N, vn, valid, v0, dloss);
      Dev<float> gd(std::vector<float>(N * vn, NAN));
      Dev<bfloat16> gdb(std::vector<bfloat16>(N * vn, bfloat16{0x7fc0}));
      kc::xent_vp_grad(gd.p(), glog.p(), gmx2.p(), gsums2.p(), gtgt.p(), N, vn, valid, v0, dloss);
      kc::xent_vp_grad(gdb.p(), glog.p(), gmx2.p(), gsums2.p(), gtgt.p(), N, vn, valid, v0, dloss);
      const auto got = gd.back(), got_bf = from_bf(gdb.back());
      expect_close(got, d, 1e-5, 1e-3, "d(logits)");
      // bf16: one rounding of each element (2^-9 relative).
      expect_close(got_bf, d, 4e-3, 1e-3, "d(logits) (bf16)");
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = valid; j < vn; ++j) {
          ASSERT_EQ(got[i * vn + j], 0.0f) << "padded column " << j;
          ASSERT_EQ(got_bf[i * vn + j], 0.0f) << "padded column " << j << " (bf16)";
        }
      kc::xent_vp_grad(glog.p(), glog.p(), gmx2.p(), gsums2.p(), gtgt.p(), N, vn, valid, v0, dloss);
      EXPECT_EQ(glog.back(), got) << "in place";
    }
  }
}

}  // namespace
}  // namespace parallm
