// CUDA kernels against the CPU reference on odd shapes, the device allocator,
// and determinism (same inputs, same bits). Without a GPU every test skips
// itself, saying why; in a CPU-only build the stubs are checked to say that
// CUDA was not built.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "attention_block_plan.h"
#include "core/error.h"
#include "core/gpu.h"
#include "cuda_test_util.h"
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

namespace parallm {
namespace {

using test::Cuda;
using test::Dev;
using test::expect_close;
using test::randv;
namespace kc = kernels::cuda;
namespace kr = kernels::ref;

// GEMM-based outputs use a floor of 1e-2 of the tensor's largest value: cuBLAS
// sums in another order than the double-precision reference, and the error of
// a float sum scales with its largest terms.

TEST(CudaStubs, SayCudaWasNotBuilt) {
  if (gpu::built()) GTEST_SKIP() << "CUDA is built";
  EXPECT_EQ(gpu::device_count(), 0);
  try {
    kc::gelu_forward(static_cast<float*>(nullptr), nullptr, 1, kernels::GeluKind::Exact);
    FAIL() << "no error";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA was not built"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu::device_alloc(16, MemCategory::Other), CudaError);
}

TEST_F(Cuda, AllocatorCachesAndAccountsPerCategory) {
  auto before = gpu::device_stats();
  void* a = gpu::device_alloc(3000, MemCategory::Activations);
  auto mid = gpu::device_stats();
  EXPECT_EQ(mid.current[int(MemCategory::Activations)], before.current[int(MemCategory::Activations)] + 3000);
  gpu::device_free(a, 3000, MemCategory::Activations);
  EXPECT_GE(gpu::device_cached_bytes(), 3000u);
  void* b = gpu::device_alloc(2900, MemCategory::Grads);  // same rounded size: the cached block comes back
  EXPECT_EQ(a, b);
  gpu::device_free(b, 2900, MemCategory::Grads);
  EXPECT_EQ(gpu::device_stats().current[int(MemCategory::Grads)], before.current[int(MemCategory::Grads)]);
}

TEST_F(Cuda, OutOfMemoryIsATypedErrorNamingTheRequest) {
  try {
    gpu::device_alloc(size_t{1} << 50, MemCategory::Params);
    FAIL() << "no error";
  } catch (const CudaError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[cuda.malloc]"), std::string::npos) << m;
    EXPECT_NE(m.find("params"), std::string::npos) << m;
  }
  // The device is still usable afterwards.
  gpu::DeviceBuffer ok(1024, MemCategory::Other);
  gpu::memset_zero(ok.data(), 1024);
  gpu::synchronize();
}

TEST_F(Cuda, MatmulMatchesReferenceOnOddShapes) {
  for (auto [N, IN, OUT] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{37, 53, 29}, {1, 7, 5}, {130, 96, 257}, {70, 40, 96}}) {
    for (bool bias : {true, false}) {
      auto x = randv(N * IN, 1), w = randv(OUT * IN, 2), bb = randv(OUT, 3), dy = randv(N * OUT, 4);
      std::vector<float> out(N * OUT), dx(N * IN), dw = randv(OUT * IN, 5), db = randv(OUT, 6);
      auto dw0 = dw, db0 = db;
      kr::matmul_forward(out.data(), x.data(), w.data(), bias ? bb.data() : nullptr, N, IN, OUT);
      kr::matmul_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dy.data(), x.data(), w.data(), N, IN, OUT);
      Dev<float> gx(x), gw(w), gb(bb), gdy(dy), gout(std::vector<float>(N * OUT, NAN)),
          gdx(std::vector<float>(N * IN, NAN)), gdw(dw0), gdb(db0);
      kc::matmul_forward(gout.p(), gx.p(), gw.p(), bias ? gb.p() : nullptr, N, IN, OUT);
      kc::matmul_backward(gdx.p(), gdw.p(), bias ? gdb.p() : nullptr, gdy.p(), gx.p(), gw.p(), N, IN, OUT);
      expect_close(gout.back(), out, 1e-4, 1e-2, "out");
      expect_close(gdx.back(), dx, 1e-4, 1e-2, "dinp");
      expect_close(gdw.back(), dw, 1e-4, 1e-2, "dweight");
      if (bias) expect_close(gdb.back(), db, 1e-4, 1e-2, "dbias");
    }
  }
}

TEST_F(Cuda, LayerNormMatchesReferenceAndAccumulates) {
  for (auto [N, C] : std::vector<std::pair<int64_t, int64_t>>{{19, 77}, {300, 768}, {1, 3}, {33, 1000}, {37, 40}}) {
    auto x = randv(N * C, 10, 2.0f), w = randv(C, 11), b = randv(C, 12), dy = randv(N * C, 13);
    std::vector<float> out(N * C), mean(N), rstd(N), dx = randv(N * C, 14), dw = randv(C, 15), db = randv(C, 16);
    Dev<float> gx(x), gw(w), gb(b), gdy(dy), gout(out), gmean(mean), grstd(rstd), gdx(dx), gdw(dw), gdb(db);
    kr::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    kr::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                           C);
    kc::layernorm_forward(gout.p(), gmean.p(), grstd.p(), gx.p(), gw.p(), gb.p(), N, C);
    kc::layernorm_backward(gdx.p(), gdw.p(), gdb.p(), gdy.p(), gx.p(), gw.p(), gmean.p(), grstd.p(), N, C);
    expect_close(gout.back(), out, 1e-4, 1e-3, "out");
    expect_close(gmean.back(), mean, 1e-4, 1e-3, "mean");
    expect_close(grstd.back(), rstd, 1e-4, 1e-3, "rstd");
    expect_close(gdx.back(), dx, 1e-4, 1e-3, "dinp");
    expect_close(gdw.back(), dw, 1e-4, 1e-3, "dweight");
    expect_close(gdb.back(), db, 1e-4, 1e-3, "dbias");
  }
}

TEST_F(Cuda, GeluMatchesReferenceBothKinds) {
  const int64_t n = 1003;
  auto x = randv(n, 20, 3.0f), dy = randv(n, 21);
  for (auto kind : {kernels::GeluKind::Exact, kernels::GeluKind::Tanh}) {
    std::vector<float> out(n), dx(n);
    kr::gelu_forward(out.data(), x.data(), n, kind);
    kr::gelu_backward(dx.data(), x.data(), dy.data(), n, kind);
    Dev<float> gx(x), gdy(dy), gout(std::vector<float>(n, NAN)), gdx(std::vector<float>(n, NAN));
    kc::gelu_forward(gout.p(), gx.p(), n, kind);
    kc::gelu_backward(gdx.p(), gx.p(), gdy.p(), n, kind);
    expect_close(gout.back(), out, 1e-5, 1e-4, "gelu out");
    expect_close(gdx.back(), dx, 1e-5, 1e-4, "gelu dinp");
  }
}

TEST_F(Cuda, AttentionMatchesReferenceWithAndWithoutDropout) {
  for (auto [B, T, C, NH] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{{2, 13, 24, 3}, {1, 1, 8, 2}, {3, 70, 64, 4}}) {
    for (float p : {0.0f, 0.1f}) {
      kernels::AttnDropout drop{p, 77, 5, 3};
      auto qkv = randv(B * T * 3 * C, 30), dy = randv(B * T * C, 31);
      std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
      std::vector<float> ws(kr::attention_workspace_floats(B, T, C, NH, 1));
      kr::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, drop, ws.data());
      kr::attention_backward(dqkv.data(), dy.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, drop, ws.data());
      Dev<float> gqkv(qkv), gdy(dy), gout(std::vector<float>(B * T * C, NAN)),
          glse(std::vector<float>(B * NH * T, NAN)), gdqkv(std::vector<float>(B * T * 3 * C, NAN)),
          gws(std::vector<float>(kc::attention_workspace_floats(B, T, C, NH, 1)));
      kc::attention_forward(gout.p(), glse.p(), gqkv.p(), B, T, C, NH, drop, gws.p());
      kc::attention_backward(gdqkv.p(), gdy.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH, drop, gws.p());
      expect_close(gout.back(), out, 1e-4, 1e-2, "attention out");
      expect_close(glse.back(), lse, 1e-5, 1e-3, "attention lse");
      expect_close(gdqkv.back(), dqkv, 1e-4, 1e-2, "attention dqkv");
    }
  }
}

// Context parallelism's blocks: the zigzag plan over 2 and 3 ranks and an
// uneven cut visited in reverse (first blocks wholly after their queries)
// through the cuda block kernels, against the cpu block kernels on the same
// plan; k | v in qkv's buffer or in their own.
TEST_F(Cuda, AttentionBlocksMatchTheCpuBlocks) {
  struct Way {
    int64_t T;
    test::Plan plan;
  };
  const auto uneven = test::cut({5, 37, 1, 21});
  for (const Way& w : {Way{4 * 37, test::zigzag_plan(4 * 37, 2)}, Way{6 * 11, test::zigzag_plan(6 * 11, 3)},
                       Way{64, test::all_pairs_plan(uneven, uneven, test::iota_order(uneven.size(), true))}})
    for (auto [B, NH, HS] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 3, 12}, {3, 2, 16}})
      for (float p : {0.0f, 0.1f})
        for (bool sep : {false, true}) {
          const int64_t T = w.T, C = NH * HS;
          const kernels::AttnDropout drop = p > 0 ? kernels::AttnDropout{p, 77, 5, 7, NH + 2} : kernels::AttnDropout{};
          auto qkv = randv(B * T * 3 * C, 700), dy = randv(B * T * C, 701);
          std::vector<float> kv(sep ? B * T * 2 * C : 0);
          for (int64_t r = 0; sep && r < B * T; ++r)
            std::copy(qkv.begin() + r * 3 * C + C, qkv.begin() + r * 3 * C + 3 * C, kv.begin() + r * 2 * C);
          const int64_t kv_ld = sep ? 2 * C : 3 * C;
          std::vector<float> out(B * T * C, NAN), lse(B * NH * T, NAN), dqkv(B * T * 3 * C, 0.0f), dkv(kv.size(), 0.0f);
          int64_t wc = 0, wg = 0;
          for (const auto& v : w.plan)
            for (const auto& k : v.keys) {
              wc = std::max(
                  wc, kernels::cpu::attention_block_workspace_floats(B, NH, v.q.len, k.len, HS, omp_get_max_threads()));
              wg = std::max(wg, kc::attention_block_workspace_floats(B, NH, v.q.len, k.len, HS, 1));
            }
          std::vector<float> ws(wc);
          auto tensors = [&](const float* q, const float* kk, const float* d, float* o, float* l, float* dq, float* dk,
                             float* wsp) {
            test::BlockTensors t;
            t.q = q, t.k = kk, t.v = kk + C, t.dout = d, t.out = o, t.lse = l, t.dq = dq, t.dk = dk, t.dv = dk + C;
            t.ws = wsp, t.q_ld = 3 * C, t.kv_ld = kv_ld, t.o_ld = C;
            return t;
          };
          const auto tc = tensors(qkv.data(), sep ? kv.data() : qkv.data() + C, dy.data(), out.data(), lse.data(),
                                  dqkv.data(), sep ? dkv.data() : dqkv.data() + C, ws.data());
          test::plan_forward(w.plan, B, NH, HS, T, tc, drop, &kernels::cpu::attention_block_forward);
          test::plan_backward(w.plan, B, NH, HS, T, tc, drop, &kernels::cpu::attention_block_backward);
          Dev<float> gqkv(qkv), gkv(sep ? kv : std::vector<float>(1)), gdy(dy),
              gout(std::vector<float>(out.size(), NAN)), glse(std::vector<float>(lse.size(), NAN)),
              gdqkv(std::vector<float>(dqkv.size(), 0.0f)), gdkv(std::vector<float>(sep ? dkv.size() : 1, 0.0f)),
              gws(std::vector<float>(wg + 1));
          const auto tg = tensors(gqkv.p(), sep ? gkv.p() : gqkv.p() + C, gdy.p(), gout.p(), glse.p(), gdqkv.p(),
                                  sep ? gdkv.p() : gdqkv.p() + C, gws.p());
          test::plan_forward(w.plan, B, NH, HS, T, tg, drop, &kc::attention_block_forward);
          test::plan_backward(w.plan, B, NH, HS, T, tg, drop, &kc::attention_block_backward);
          const std::string what = "T=" + std::to_string(T) + " B=" + std::to_string(B) + " HS=" + std::to_string(HS) +
                                   " p=" + std::to_string(p) + (sep ? " separate kv" : " qkv");
          // Within 1e-5 of the tensor's largest value (a floor of 1: absolute against max |want|).
          expect_close(gout.back(), out, 1e-5, 1.0, (what + ": out").c_str());
          expect_close(glse.back(), lse, 1e-5, 1.0, (what + ": lse").c_str());
          expect_close(gdqkv.back(), dqkv, 1e-5, 1.0, (what + ": dqkv").c_str());
          if (sep) expect_close(gdkv.back(), dkv, 1e-5, 1.0, (what + ": dkv").c_str());
        }
}

TEST_F(Cuda, CopyRowsAndFillOnTheDevice) {
  const auto& k = kernels::ops_for(Device::cuda());
  const auto src = randv(7 * 11, 710);
  Dev<float> gsrc(src), gdst(std::vector<float>(7 * 9, -1.0f));
  k.copy_rows(gdst.p() + 2, 9, gsrc.p() + 3, 11, 5, 7);  // columns 3..7 of src's rows to columns 2..6 of dst's
  auto dst = gdst.back();
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 9; ++c)
      ASSERT_EQ(dst[r * 9 + c], c >= 2 && c < 7 ? src[r * 11 + 3 + c - 2] : -1.0f) << r << " " << c;
  k.fill(gdst.p() + 1, 60, 2.5f);
  dst = gdst.back();
  for (int64_t i = 0; i < 63; ++i) ASSERT_EQ(dst[i], i >= 1 && i < 61 ? 2.5f : -1.0f) << i;
  // bf16 elements, through the bf16 table (which has no block kernels: fp32 only).
  const auto& kb = kernels::bf16_ops_for(Device::cuda());
  EXPECT_EQ(kb.attention_block_forward, nullptr);
  std::vector<bfloat16> hs(4 * 3);
  for (size_t i = 0; i < hs.size(); ++i) hs[i] = bfloat16{static_cast<uint16_t>(1000 + i)};
  Dev<bfloat16> gbs(hs), gbd(std::vector<bfloat16>(4 * 6, bfloat16{0}));
  kb.copy_rows(gbd.p() + 1, 6, gbs.p(), 3, 3, 4);
  auto hb = gbd.back();
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 6; ++c)
      ASSERT_EQ(hb[r * 6 + c].bits, c >= 1 && c < 4 ? 1000 + r * 3 + c - 1 : 0) << r << " " << c;
  kb.fill(gbd.p(), 5, -0.75f);
  hb = gbd.back();
  for (int64_t i = 0; i < 5; ++i) ASSERT_EQ(hb[i].bits, f32_to_bf16(-0.75f)) << i;
  EXPECT_EQ(hb[5].bits, 0);
}

TEST_F(Cuda, ClassifierMatchesReferenceInOneChunkAndMany) {
  // The second shape needs more than one chunk of the CUDA workspace.
  // Rows read 16 bytes at a time (V = 5000, 50304, 270000) and one element at a time (V = 67).
  for (auto [N, C, V] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {23, 16, 67}, {260, 8, 270000}, {70, 24, 5000}, {37, 24, 50304}}) {
    auto x = randv(N * C, 40), wte = randv(V * C, 41, 0.5f);
    std::vector<int32_t> tgt(N);
    for (int64_t i = 0; i < N; ++i) tgt[i] = static_cast<int32_t>((i * 7919) % V);
    std::vector<float> losses(N), dx(N * C), dwte = randv(V * C, 42);
    std::vector<float> ws(kr::classifier_workspace_floats(N, V, 1));
    Dev<float> gx(x), gwte(wte), gdwte(dwte), glosses(std::vector<float>(N, NAN)), gdx(std::vector<float>(N * C, NAN)),
        gws(std::vector<float>(kc::classifier_workspace_floats(N, V, 1)));
    Dev<int32_t> gtgt(tgt);
    kr::classifier_forward_backward(losses.data(), dx.data(), dwte.data(), x.data(), wte.data(), tgt.data(), N, C, V,
                                    0.25f, ws.data());
    kc::classifier_forward_backward(glosses.p(), gdx.p(), gdwte.p(), gx.p(), gwte.p(), gtgt.p(), N, C, V, 0.25f,
                                    gws.p());
    expect_close(glosses.back(), losses, 1e-5, 1e-3, "losses");
    expect_close(gdx.back(), dx, 1e-4, 1e-2, "dx");
    expect_close(gdwte.back(), dwte, 1e-4, 1e-2, "dwte");
    // Forward only: losses, nothing else touched.
    Dev<float> glosses2(std::vector<float>(N, NAN));
    kc::classifier_forward_backward(glosses2.p(), nullptr, nullptr, gx.p(), gwte.p(), gtgt.p(), N, C, V, 1.0f, gws.p());
    expect_close(glosses2.back(), losses, 1e-5, 1e-3, "forward-only losses");
  }
}

TEST_F(Cuda, EmbeddingMatchesReferenceAndIsDeterministic) {
  const int64_t B = 3, T = 7, C = 45, V = 11;
  std::vector<int32_t> tok(B * T);
  for (int64_t i = 0; i < B * T; ++i) tok[i] = static_cast<int32_t>((i * i + 3) % V);  // repeated tokens
  auto wte = randv(V * C, 50), wpe = randv(T * C, 51), dy = randv(B * T * C, 52);
  std::vector<float> out(B * T * C), dwte = randv(V * C, 53), dwpe = randv(T * C, 54);
  Dev<int32_t> gtok(tok);
  Dev<float> gwte(wte), gwpe(wpe), gdy(dy), gout(out), gdwte(dwte), gdwpe(dwpe), gdwte2(dwte);
  kr::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  kr::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), B, T, C);
  kc::embedding_forward(gout.p(), gtok.p(), gwte.p(), gwpe.p(), B, T, C);
  kc::embedding_backward(gdwte.p(), gdwpe.p(), gdy.p(), gtok.p(), B, T, C);
  expect_close(gout.back(), out, 1e-6, 1e-4, "embedding out");
  expect_close(gdwte.back(), dwte, 1e-5, 1e-3, "dwte");
  expect_close(gdwpe.back(), dwpe, 1e-5, 1e-3, "dwpe");
  Dev<float> gdwpe2(randv(T * C, 54));
  kc::embedding_backward(gdwte2.p(), gdwpe2.p(), gdy.p(), gtok.p(), B, T, C);
  EXPECT_EQ(gdwte.back(), gdwte2.back()) << "embedding backward is not bitwise repeatable";
}

// A token that fills much of the batch (character data's space): one long
// run of the sorted tokens, summed by several rows of threads.
TEST_F(Cuda, EmbeddingBackwardSumsALongRunOfOneToken) {
  const int64_t B = 4, T = 1000, C = 200, V = 5;
  std::vector<int32_t> tok(B * T);
  for (int64_t i = 0; i < B * T; ++i) tok[i] = i % 7 == 3 ? static_cast<int32_t>(i % V) : 2;
  auto dy = randv(B * T * C, 55);
  std::vector<float> dwte = randv(V * C, 56), dwpe = randv(T * C, 57);
  Dev<int32_t> gtok(tok);
  Dev<float> gdy(dy), gdwte(dwte), gdwpe(dwpe), gdwte2(dwte), gdwpe2(dwpe);
  kr::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), B, T, C);
  kc::embedding_backward(gdwte.p(), gdwpe.p(), gdy.p(), gtok.p(), B, T, C);
  // fp32 sums of ~3400 terms in another order than the reference's.
  expect_close(gdwte.back(), dwte, 1e-3, 1e-2, "dwte");
  expect_close(gdwpe.back(), dwpe, 1e-4, 1e-2, "dwpe");
  kc::embedding_backward(gdwte2.p(), gdwpe2.p(), gdy.p(), gtok.p(), B, T, C);
  EXPECT_EQ(gdwte.back(), gdwte2.back()) << "embedding backward is not bitwise repeatable";
}

TEST_F(Cuda, ElementwiseAndDropoutMatchReferenceExactly) {
  const int64_t n = 4099;
  auto a = randv(n, 60), b = randv(n, 61);
  std::vector<float> sum(n), acc = a, drop(n), ddrop(n);
  kr::residual_forward(sum.data(), a.data(), b.data(), n);
  kr::add_inplace(acc.data(), b.data(), n);
  kr::dropout_forward(drop.data(), a.data(), n, 0.3f, 9, 4, 1000);
  kr::dropout_backward(ddrop.data(), b.data(), n, 0.3f, 9, 4, 1000);
  Dev<float> ga(a), gb(b), gsum(std::vector<float>(n, NAN)), gacc(a), gdrop(std::vector<float>(n, NAN)),
      gddrop(std::vector<float>(n, NAN));
  kc::residual_forward(gsum.p(), ga.p(), gb.p(), n);
  kc::add_inplace(gacc.p(), gb.p(), n);
  kc::dropout_forward(gdrop.p(), ga.p(), n, 0.3f, 9, 4, 1000);
  kc::dropout_backward(gddrop.p(), gb.p(), n, 0.3f, 9, 4, 1000);
  std::vector<float> scaled = a;
  kr::scale_inplace(scaled.data(), n, 0.37f);
  Dev<float> gscaled(a);
  kc::scale_inplace(gscaled.p(), n, 0.37f);
  EXPECT_EQ(gscaled.back(), scaled);
  EXPECT_EQ(gsum.back(), sum);
  EXPECT_EQ(gacc.back(), acc);
  EXPECT_EQ(gdrop.back(), drop) << "dropout masks differ from the CPU's";
  EXPECT_EQ(gddrop.back(), ddrop);
}

TEST_F(Cuda, AdamWAndSumSquaresMatchReference) {
  const int64_t n = 1001;
  auto p = randv(n, 70), m = randv(n, 71, 0.1f), v = randv(n, 72, 0.1f);
  for (auto& x : v) x = x * x;
  Dev<float> gp(p), gm(m), gv(v);
  for (int step = 1; step <= 3; ++step) {
    auto g = randv(n, 80 + step);
    Dev<float> gg(g);
    kernels::AdamWParams ap{{1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f}, step, 0.5f};
    kr::adamw_step(p.data(), g.data(), m.data(), v.data(), n, ap);
    kc::adamw_step(gp.p(), gg.p(), gm.p(), gv.p(), n, ap);
  }
  // m and v are sums of terms that can cancel; where the GPU fuses a multiply-add
  // and the host does not, a small result carries the rounding of its terms.
  expect_close(gp.back(), p, 1e-5, 1e-2, "param");
  expect_close(gm.back(), m, 1e-5, 1e-2, "m");
  expect_close(gv.back(), v, 1e-5, 1e-2, "v");
  // The bf16 copy written in the same pass: the updated weight rounded to nearest even, on the vector path
  // (offset 0) and the element path (offset 1: misaligned).
  for (int64_t off : {0, 1}) {
    auto g = randv(n, 95);
    Dev<float> gg(g);
    Dev<bfloat16> gc(std::vector<bfloat16>(n, bfloat16{0}));
    kernels::AdamWParams ap{{1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f}, 4, 0.5f};
    kc::adamw_step(gp.p() + off, gg.p() + off, gm.p() + off, gv.p() + off, n - off, ap, gc.p() + off);
    const auto w = gp.back();
    const auto c = gc.back();
    EXPECT_EQ(c[0].bits, off == 0 ? f32_to_bf16(w[0]) : 0);
    for (int64_t i = off; i < n; ++i) ASSERT_EQ(c[i].bits, f32_to_bf16(w[i])) << "offset " << off << ", element " << i;
  }
  // Many runs in one call (two launches past 40 runs): bitwise what one call per run gives. Runs of odd
  // lengths and offsets (the element path), one empty, long ones over several blocks; decay on every other one.
  {
    std::vector<kernels::AdamWRun> runs;
    int64_t off = 0;
    for (int i = 0; i < 45; ++i) {
      const int64_t len = i == 7 ? 0 : (i % 5 == 0 ? 20001 : 1 + (i * 37) % 300);
      runs.push_back({off, off, off, len, i % 2 == 0});
      off += len + (i % 3 == 0 ? 4 : 1);
    }
    const int64_t total = off;
    auto w0 = randv(total, 96), g = randv(total, 97), m0 = randv(total, 98, 0.1f), v0 = randv(total, 99, 0.1f);
    for (auto& x : v0) x = x * x;
    Dev<float> wa(w0), ma(m0), va(v0), wb(w0), mb(m0), vb(v0), gg(g);
    Dev<bfloat16> ca(std::vector<bfloat16>(total, bfloat16{0})), cb(std::vector<bfloat16>(total, bfloat16{0}));
    kernels::AdamWParams ap{{1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f}, 2, 0.7f};
    kc::adamw_runs(wa.p(), gg.p(), ma.p(), va.p(), runs.data(), static_cast<int64_t>(runs.size()), ap, ca.p());
    for (const auto& r : runs) {
      auto q = ap;
      q.weight_decay = r.decay ? ap.weight_decay : 0.0f;
      kc::adamw_step(wb.p() + r.param, gg.p() + r.grad, mb.p() + r.state, vb.p() + r.state, r.length, q,
                     cb.p() + r.param);
    }
    EXPECT_EQ(wa.back(), wb.back());
    EXPECT_EQ(ma.back(), mb.back());
    EXPECT_EQ(va.back(), vb.back());
    const auto c1 = ca.back(), c2 = cb.back();
    const auto w1 = wa.back();
    for (int64_t i = 0; i < total; ++i) ASSERT_EQ(c1[i].bits, c2[i].bits) << "element " << i;
    for (const auto& r : runs)
      for (int64_t i = r.param; i < r.param + r.length; ++i) ASSERT_EQ(c1[i].bits, f32_to_bf16(w1[i])) << i;
    EXPECT_EQ(w1[runs[1].param - 1], w0[runs[1].param - 1]) << "gaps between runs stay untouched";
  }
  auto x = randv(300007, 90);
  Dev<float> gx(x);
  double want = kr::sum_squares(x.data(), static_cast<int64_t>(x.size()));
  double got = kc::sum_squares(gx.p(), static_cast<int64_t>(x.size()));
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_EQ(got, kc::sum_squares(gx.p(), static_cast<int64_t>(x.size())));
  // Several runs with one readback: each run's sum the one-call sum's bits (an empty run 0).
  const std::vector<int64_t> off{0, 17, 300000, 5}, cnt{17, 299983, 7, 0};
  std::vector<double> many(off.size());
  kernels::sum_squares_runs(Device::cuda(0), gx.p(), off.data(), cnt.data(), 4, many.data());
  for (size_t i = 0; i < off.size(); ++i)
    EXPECT_EQ(many[i], cnt[i] > 0 ? kc::sum_squares(gx.p() + off[i], cnt[i]) : 0.0) << "run " << i;
}

TEST_F(Cuda, LayerNormBackwardIsBitwiseRepeatable) {
  const int64_t N = 1000, C = 96;
  auto x = randv(N * C, 100), w = randv(C, 101), dy = randv(N * C, 102);
  std::vector<float> mean(N), rstd(N), out(N * C);
  Dev<float> gx(x), gw(w), gdy(dy), gout(out), gmean(mean), grstd(rstd);
  kc::layernorm_forward(gout.p(), gmean.p(), grstd.p(), gx.p(), gw.p(), nullptr, N, C);
  std::vector<float> first;
  for (int rep = 0; rep < 2; ++rep) {
    Dev<float> gdx(std::vector<float>(N * C, 0.0f)), gdw(std::vector<float>(C, 0.0f)), gdb(std::vector<float>(C, 0.0f));
    kc::layernorm_backward(gdx.p(), gdw.p(), gdb.p(), gdy.p(), gx.p(), gw.p(), gmean.p(), grstd.p(), N, C);
    auto dw = gdw.back();
    if (rep == 0)
      first = dw;
    else
      EXPECT_EQ(dw, first);
  }
}

}  // namespace
}  // namespace parallm
