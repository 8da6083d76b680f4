// The CPU's emulated fp16 products (kernels/cpu/f16.h): the rounding against
// the compiler's binary16 (_Float16, GCC 12's software conversion) on edge
// values and random ones over the whole range, on the vector path and the
// tail; the products equal the fp32 GEMM of pre-rounded operands bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/classifier.h"
#include "kernels/cpu/f16.h"
#include "kernels/matmul.h"

using namespace parallm;

namespace {
float oracle(float x) {
  return static_cast<float>(static_cast<_Float16>(x));
}
bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}
}  // namespace

TEST(F16Products, RoundingMatchesBinary16) {
  std::vector<float> v = {0.0f,         -0.0f,    1.0f,      -1.0f,    65504.0f,      65519.0f,      65520.0f,
                          -65520.0f,    65536.0f, 1e30f,     0x1p-14f, 0x1p-24f,      0x1p-25f,      0x1.8p-25f,
                          3 * 0x1p-26f, 0x1p-26f, 1e-8f,     0.1f,     1.0f / 3,      2049.0f,       2051.0f,
                          4097.5f,      INFINITY, -INFINITY, NAN,      1.0009765625f, 1.00048828125f};
  std::mt19937_64 g(7);
  std::uniform_real_distribution<float> e(-30.0f, 17.0f);
  for (int i = 0; i < 4000; ++i) v.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(e(g)));  // every binade, subnormals
  for (size_t n : {v.size(), v.size() - 3, size_t{5}}) {  // the vector path and its tail, and the tail alone
    std::vector<float> out(n);
    kernels::cpu::round_to_f16(out.data(), v.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(same_bits(out[i], oracle(v[i])))
          << "x = " << v[i] << " (" << std::hexfloat << v[i] << "): got " << out[i] << ", binary16 " << oracle(v[i]);
  }
}

TEST(F16Products, MatmulIsTheFp32GemmOfRoundedOperands) {
  const int64_t N = 37, IN = 29, OUT = 19;  // odd shapes
  auto x = test::randv(N * IN, 1), w = test::randv(OUT * IN, 2, 0.2f), b = test::randv(OUT, 3),
       dy = test::randv(N * OUT, 4, 1e-3f);
  auto rounded = [](std::vector<float> v) {
    for (float& t : v) t = oracle(t);
    return v;
  };
  std::vector<float> got(N * OUT), want(N * OUT);
  kernels::cpu::matmul_forward_f16p(got.data(), x.data(), w.data(), b.data(), N, IN, OUT);
  kernels::cpu::matmul_forward(want.data(), rounded(x).data(), rounded(w).data(), b.data(), N, IN, OUT);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  std::vector<float> dx(N * IN), dw(OUT * IN, 0.5f), db(OUT, 0.25f), dx2(N * IN), dw2(dw), db2(db);
  kernels::cpu::matmul_backward_f16p(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IN, OUT);
  kernels::cpu::matmul_backward(dx2.data(), dw2.data(), db2.data(), rounded(dy).data(), rounded(x).data(),
                                rounded(w).data(), N, IN, OUT);
  EXPECT_EQ(0, std::memcmp(dx.data(), dx2.data(), dx.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dw.data(), dw2.data(), dw.size() * sizeof(float)));
  // The bias gradient sums dout unrounded (fp32), as the fp32 kernel does.
  std::vector<float> dx3(N * IN), dw3(OUT * IN, 0.5f), db3(OUT, 0.25f);
  kernels::cpu::matmul_backward(dx3.data(), dw3.data(), db3.data(), dy.data(), x.data(), w.data(), N, IN, OUT);
  EXPECT_EQ(0, std::memcmp(db.data(), db3.data(), db.size() * sizeof(float)));
  // A large gradient overflows binary16 (the loss scaler's business): infinity, not a clamp.
  std::vector<float> big(dy);
  big[0] = 1e6f;
  kernels::cpu::matmul_backward_f16p(dx.data(), nullptr, nullptr, big.data(), x.data(), w.data(), N, IN, OUT);
  bool inf = false;
  for (int64_t i = 0; i < IN; ++i) inf |= std::isinf(dx[i]);
  EXPECT_TRUE(inf);
}

TEST(F16Products, ClassifierLogitsAreTheFp32ProductOfRoundedOperands) {
  const int64_t N = 11, C = 24, V = 65;
  auto x = test::randv(N * C, 5), w = test::randv(V * C, 6, 0.3f);
  std::vector<float> xr(x), wr(w), got(N * V), want(N * V);
  for (float& t : xr) t = oracle(t);
  for (float& t : wr) t = oracle(t);
  kernels::cpu::classifier_logits_f16p(got.data(), x.data(), w.data(), N, C, V);
  kernels::cpu::classifier_logits(want.data(), xr.data(), wr.data(), N, C, V);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}
