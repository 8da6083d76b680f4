// The GPU's low-precision products with fp32 activations (kernels/cuda/lowp.cuh)
// against the CPU's emulated ones on odd shapes: fp16 and bf16-rounded
// products within fp32 summation order (every product of rounded values is
// exact on both); FP8 rows bit for bit, read back through an identity weight
// (a row times the identity is the row itself, so the product returns the
// rounded operand exactly), E4M3 in forward and E5M2 in backward. Skipped,
// visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "kernels/classifier.h"
#include "kernels/fp8.h"
#include "kernels/matmul.h"

namespace parallm {
namespace {

using test::Dev;
using test::expect_close;
namespace kc = kernels::cuda;
namespace kp = kernels::cpu;

class CudaLowp : public test::Cuda {};

using Fwd = void (*)(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);
using Bwd = void (*)(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);

// Rows of very different magnitudes (each row's scale absorbs that; one tensor scale does not), a zero row, and
// rows whose elements span
// 2^-39 of their maximum: E4M3's and E5M2's subnormals after scaling, and values that round to zero.
std::vector<float> spread_rows(int64_t rows, int64_t cols, uint64_t seed) {
  auto v = test::randv(rows * cols, seed);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      v[r * cols + c] *= std::ldexp(1.0f, static_cast<int>(r % 7) * 9 - 30);
      if (r % 3 == 1) v[r * cols + c] *= std::ldexp(1.0f, -static_cast<int>(c % 40));
    }
  for (int64_t c = 0; c < cols; ++c) v[3 * cols + c] = 0.0f;
  return v;
}

void compare_products(Fwd cpu_f, Fwd gpu_f, Bwd cpu_b, Bwd gpu_b, const char* what) {
  const int64_t N = 37, IN = 70, OUT = 29;
  const auto x = test::randv(N * IN, 1), w = test::randv(OUT * IN, 2, 0.1f), b = test::randv(OUT, 3);
  const auto dy = test::randv(N * OUT, 4), dw0 = test::randv(OUT * IN, 5), db0 = test::randv(OUT, 6);
  std::vector<float> y(N * OUT), dx(N * IN), dw = dw0, db = db0;
  cpu_f(y.data(), x.data(), w.data(), b.data(), N, IN, OUT);
  cpu_b(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IN, OUT);
  Dev<float> gx(x), gw(w), gb(b), gdy(dy), gy(std::vector<float>(N * OUT, NAN)), gdx(std::vector<float>(N * IN, NAN)),
      gdw(dw0), gdb(db0);
  gpu_f(gy.p(), gx.p(), gw.p(), gb.p(), N, IN, OUT);
  gpu_b(gdx.p(), gdw.p(), gdb.p(), gdy.p(), gx.p(), gw.p(), N, IN, OUT);
  SCOPED_TRACE(what);  // fp32 sums in another order (tensor cores for the bf16 values): the fp32 kernels' bar
  expect_close(gy.back(), y, 1e-4, 1e-2, "out");
  expect_close(gdx.back(), dx, 1e-4, 1e-2, "dinp");
  expect_close(gdw.back(), dw, 1e-4, 1e-2, "dweight (+=)");
  expect_close(gdb.back(), db, 1e-4, 1e-2, "dbias (+=)");
}

TEST_F(CudaLowp, Fp16AndFp8ProductsAreTheCpusOnOddShapes) {
  compare_products(&kp::matmul_forward_f16p, &kc::matmul_forward_f16p, &kp::matmul_backward_f16p,
                   &kc::matmul_backward_f16p, "fp16");
  compare_products(&kp::matmul_forward_fp8p, &kc::matmul_forward_fp8p, &kp::matmul_backward_fp8p,
                   &kc::matmul_backward_fp8p, "bf16-rounded (outside an FP8 scope)");
  kernels::Fp8Scope on(true);
  compare_products(&kp::matmul_forward_fp8p, &kc::matmul_forward_fp8p, &kp::matmul_backward_fp8p,
                   &kc::matmul_backward_fp8p, "FP8");
}

// Tensorwise FP8 on FP8 tensor cores (sm_89 and later; shapes multiples of 16): the codes are the CPU's rounding,
// the products exact, the sums fp32 in cuBLASLt's order; odd shapes take the bf16-valued path instead.
TEST_F(CudaLowp, TensorwiseFp8RunsFp8TensorCoresAndComputesTheCpusProducts) {
  const kernels::Fp8TensorwiseScope tw({true, {}});
  const kernels::Fp8Scope on(true);
  const int64_t before = kc::fp8_tensor_core_gemms();
  compare_products(&kp::matmul_forward_fp8p, &kc::matmul_forward_fp8p, &kp::matmul_backward_fp8p,
                   &kc::matmul_backward_fp8p, "FP8 tensorwise, odd shapes");
  EXPECT_EQ(kc::fp8_tensor_core_gemms(), before) << "odd shapes stay off the FP8 tensor cores";
  const int64_t N = 64, IN = 96, OUT = 48;
  const auto x = test::randv(N * IN, 21), w = test::randv(OUT * IN, 22, 0.1f), dy = test::randv(N * OUT, 23);
  const auto dw0 = test::randv(OUT * IN, 24), b = test::randv(OUT, 25), db0 = test::randv(OUT, 26);
  std::vector<float> y(N * OUT), dx(N * IN), dw = dw0, db = db0, dw_only = dw0;
  kp::matmul_forward_fp8p(y.data(), x.data(), w.data(), b.data(), N, IN, OUT);
  kp::matmul_backward_fp8p(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IN, OUT);
  kp::matmul_backward_fp8p(nullptr, dw_only.data(), nullptr, dy.data(), x.data(), w.data(), N, IN, OUT);
  Dev<float> gx(x), gw(w), gb(b), gdy(dy), gy(std::vector<float>(N * OUT, NAN)), gdx(std::vector<float>(N * IN, NAN)),
      gdw(dw0), gdb(db0), gdw_only(dw0);
  kc::matmul_forward_fp8p(gy.p(), gx.p(), gw.p(), gb.p(), N, IN, OUT);
  kc::matmul_backward_fp8p(gdx.p(), gdw.p(), gdb.p(), gdy.p(), gx.p(), gw.p(), N, IN, OUT);
  kc::matmul_backward_fp8p(nullptr, gdw_only.p(), nullptr, gdy.p(), gx.p(), gw.p(), N, IN, OUT);  // the weight's alone
  if (gpu::compute_capability(gpu::current_device()) >= 89) {
    EXPECT_EQ(kc::fp8_tensor_core_gemms(), before + 4) << "forward, input and weight gradients on FP8 tensor cores";
  }
  expect_close(gy.back(), y, 1e-3, 1e-3, "out (+ bias)");
  expect_close(gdx.back(), dx, 1e-3, 1e-3, "dinp");
  expect_close(gdw.back(), dw, 1e-3, 1e-3, "dweight (+=)");
  expect_close(gdb.back(), db, 1e-4, 1e-3, "dbias (+=, fp32)");
  expect_close(gdw_only.back(), dw_only, 1e-3, 1e-3, "dweight alone (+=)");
}

// train.fp8_activations=bf16: the same FP8 products from bf16 operands (values on the bf16 grid, so their codes
// are the CPU's), out and d(input) rounded to bf16 once, a residual added in the epilogue.
TEST_F(CudaLowp, Fp8WithBf16ActivationsRunsFp8TensorCoresAndComputesTheCpusProducts) {
  if (gpu::compute_capability(gpu::current_device()) < 89) GTEST_SKIP() << "no FP8 tensor cores before sm_89";
  const kernels::Fp8TensorwiseScope tw({true, {}});
  const kernels::Fp8Scope on(true);
  const int64_t N = 64, IN = 96, OUT = 48;
  auto grid = [](std::vector<float> v) {
    for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
  };
  auto dev_bf = [](const std::vector<float>& v) {
    std::vector<bfloat16> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i].bits = f32_to_bf16(v[i]);
    return Dev<bfloat16>(r);
  };
  auto back_f = [](const Dev<bfloat16>& d) {
    std::vector<float> r;
    for (const bfloat16& b : d.back()) r.push_back(bf16_to_f32(b.bits));
    return r;
  };
  const auto x = grid(test::randv(N * IN, 31)), w = grid(test::randv(OUT * IN, 32, 0.1f));
  const auto dy = grid(test::randv(N * OUT, 33)), b = grid(test::randv(OUT, 34)), res = grid(test::randv(N * OUT, 35));
  const auto dw0 = test::randv(OUT * IN, 36), db0 = test::randv(OUT, 37);
  std::vector<float> y(N * OUT), dx(N * IN), dw = dw0, db = db0;
  kp::matmul_forward_fp8p(y.data(), x.data(), w.data(), b.data(), N, IN, OUT);
  kp::matmul_backward_fp8p(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IN, OUT);
  std::vector<float> yr = y;
  for (int64_t i = 0; i < N * OUT; ++i) yr[i] += res[i];
  const int64_t before = kc::fp8_tensor_core_gemms();
  Dev<bfloat16> gx = dev_bf(x), gw = dev_bf(w), gb = dev_bf(b), gdy = dev_bf(dy), gres = dev_bf(res);
  Dev<bfloat16> gy = dev_bf(std::vector<float>(N * OUT, NAN)), gyr = dev_bf(std::vector<float>(N * OUT, NAN));
  Dev<bfloat16> gdx = dev_bf(std::vector<float>(N * IN, NAN));
  Dev<float> gdw(dw0), gdb(db0);
  kc::matmul_forward_fp8b(gy.p(), gx.p(), gw.p(), gb.p(), N, IN, OUT);
  kc::matmul_forward_residual_fp8b(gyr.p(), gx.p(), gw.p(), gb.p(), gres.p(), N, IN, OUT);
  kc::matmul_backward_fp8b(gdx.p(), gdw.p(), gdb.p(), gdy.p(), gx.p(), gw.p(), N, IN, OUT);
  EXPECT_EQ(kc::fp8_tensor_core_gemms(), before + 4) << "forward twice, input and weight gradients on FP8 cores";
  expect_close(back_f(gy), y, 8e-3, 1e-2, "out (+ bias), bf16");
  expect_close(back_f(gyr), yr, 8e-3, 1e-2, "out (+ bias + residual), bf16");
  expect_close(back_f(gdx), dx, 8e-3, 1e-2, "dinp, bf16");
  expect_close(gdw.back(), dw, 1e-3, 1e-3, "dweight (+=)");
  expect_close(gdb.back(), db, 1e-4, 1e-3, "dbias (+=, fp32)");
  // Outside an FP8 scope: the bf16 products.
  const kernels::Fp8Scope off(false);
  std::vector<float> ref(N * OUT);
  kp::matmul_forward(ref.data(), x.data(), w.data(), b.data(), N, IN, OUT);
  kc::matmul_forward_fp8b(gy.p(), gx.p(), gw.p(), gb.p(), N, IN, OUT);
  EXPECT_EQ(kc::fp8_tensor_core_gemms(), before + 4);
  expect_close(back_f(gy), ref, 8e-3, 1e-2, "out outside the scope (bf16 products)");
}

TEST_F(CudaLowp, Fp8RowsAreTheCpusBitForBit) {
  const int64_t N = 33, C = 40;
  std::vector<float> eye(C * C, 0.0f);
  for (int64_t i = 0; i < C; ++i) eye[i * C + i] = 1.0f;
  // Per row, then per tensor (train.fp8_scaling=tensorwise: one scale, the rows' spread in the subnormals).
  for (uint64_t seed : {11, 12, 13, 14}) {
    const kernels::Fp8TensorwiseScope tw({seed > 12, {}});
    const kernels::Fp8Scope on(true);
    SCOPED_TRACE(seed > 12 ? "tensorwise" : "rowwise");
    const auto x = spread_rows(N, C, seed);
    std::vector<float> y(N * C), dx(N * C);
    kp::matmul_forward_fp8p(y.data(), x.data(), eye.data(), nullptr, N, C, C);                       // E4M3 rows of x
    kp::matmul_backward_fp8p(dx.data(), nullptr, nullptr, x.data(), x.data(), eye.data(), N, C, C);  // E5M2
    Dev<float> gx(x), ge(eye), gy(std::vector<float>(N * C, NAN)), gdx(std::vector<float>(N * C, NAN));
    kc::matmul_forward_fp8p(gy.p(), gx.p(), ge.p(), nullptr, N, C, C);
    kc::matmul_backward_fp8p(gdx.p(), nullptr, nullptr, gx.p(), gx.p(), ge.p(), N, C, C);
    const auto a = gy.back(), d = gdx.back();
    for (int64_t i = 0; i < N * C; ++i) {
      ASSERT_EQ(a[i], y[i]) << "E4M3 row " << i / C << " column " << i % C << " of " << x[i];
      ASSERT_EQ(d[i], dx[i]) << "E5M2 row " << i / C << " column " << i % C << " of " << x[i];
    }
  }
}

TEST_F(CudaLowp, ClassifierProductsAreTheCpus) {
  for (int64_t V : {67, 5000}) {
    const int64_t N = 37, C = 24;
    const auto x = test::randv(N * C, 21), wte = test::randv(V * C, 22, 0.2f), dwte0 = test::randv(V * C, 23);
    std::vector<int32_t> t(N);
    for (int64_t i = 0; i < N; ++i) t[i] = static_cast<int32_t>((i * 31) % V);
    for (bool f16 : {true, false}) {
      SCOPED_TRACE(testing::Message() << (f16 ? "fp16" : "bf16-rounded") << " V=" << V);
      std::vector<float> loss(N), dx(N * C), dwte = dwte0, logits(N * V);
      std::vector<float> ws(kp::classifier_workspace_floats(N, V, 1));
      (f16 ? kp::classifier_forward_backward_f16p : kp::classifier_forward_backward_bf16r)(
          loss.data(), dx.data(), dwte.data(), x.data(), wte.data(), t.data(), N, C, V, 1.0f / N, ws.data());
      (f16 ? kp::classifier_logits_f16p : kp::classifier_logits_bf16r)(logits.data(), x.data(), wte.data(), N, C, V);
      Dev<float> gx(x), gw(wte), gdw(dwte0), gloss(std::vector<float>(N, NAN)), gdx(std::vector<float>(N * C, NAN)),
          glog(std::vector<float>(N * V, NAN)), gws(std::vector<float>(kc::classifier_workspace_floats(N, V, 1)));
      Dev<int32_t> gt(t);
      (f16 ? kc::classifier_forward_backward_f16p : kc::classifier_forward_backward_bf16r)(
          gloss.p(), gdx.p(), gdw.p(), gx.p(), gw.p(), gt.p(), N, C, V, 1.0f / N, gws.p());
      (f16 ? kc::classifier_logits_f16p : kc::classifier_logits_bf16r)(glog.p(), gx.p(), gw.p(), N, C, V);
      // The softmax's last-bit differences (expf against the CPU's) flip a few d(logits) by one fp16 / bf16 step
      // when they are rounded: the gradients are judged at that step's size.
      expect_close(gloss.back(), loss, 1e-5, 1e-2, "losses");
      expect_close(glog.back(), logits, 1e-4, 1e-2, "logits");
      expect_close(gdx.back(), dx, f16 ? 2e-3 : 1e-2, 5e-2, "dx");
      expect_close(gdw.back(), dwte, f16 ? 2e-3 : 1e-2, 5e-2, "dwte (+=)");
    }
  }
}

}  // namespace
}  // namespace parallm
