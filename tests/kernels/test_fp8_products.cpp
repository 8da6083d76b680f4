// The CPU's emulated FP8 products (kernels/cpu/fp8.h): the rounding against
// the formats' own tables (every finite E4M3 / E5M2 value decoded from its 8
// bits, the nearest taken by search, ties to the even code) on edge values and
// random ones over the whole range; the row scaling (the least power of two
// that fits the row's maximum, zero and non-finite rows); a reduced row maximum
// moving the scale; the matmul inside an FP8 scope equal to the fp32 GEMM of
// the rows so rounded, and outside it to that of bf16-rounded operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/fp8.h"
#include "kernels/fp8.h"
#include "kernels/matmul.h"

using namespace parallm;
using kernels::cpu::Fp8Format;

namespace {
// Every finite non-negative value of the format, decoded from its bits (E4M3 as OCP's "FN": no infinities, only
// S.1111.111 is NaN; E5M2 as IEEE: exponent 31 is infinity or NaN), ascending, with its code.
std::vector<std::pair<double, int>> table(Fp8Format f) {
  const int m = f == Fp8Format::E4M3 ? 3 : 2, bias = f == Fp8Format::E4M3 ? 7 : 15;
  std::vector<std::pair<double, int>> t;
  for (int code = 0; code < 128; ++code) {
    const int e = code >> m, man = code & ((1 << m) - 1);
    if (f == Fp8Format::E4M3 && e == 15 && man == 7) continue;
    if (f == Fp8Format::E5M2 && e == 31) continue;
    const double v = e == 0 ? std::ldexp(man, 1 - bias - m) : std::ldexp((1 << m) + man, e - bias - m);
    t.push_back({v, code});
  }
  std::sort(t.begin(), t.end());
  return t;
}
// Nearest in the table (ties: the even code), saturating at the largest.
float oracle(float x, const std::vector<std::pair<double, int>>& t) {
  const double a = std::fabs(static_cast<double>(x));
  if (a >= t.back().first) return std::copysign(static_cast<float>(t.back().first), x);
  auto hi = std::lower_bound(t.begin(), t.end(), std::make_pair(a, -1));
  auto lo = hi == t.begin() ? hi : hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  const auto& pick = dl < dh ? *lo : dh < dl ? *hi : (lo->second % 2 == 0 ? *lo : *hi);
  return std::copysign(static_cast<float>(pick.first), x);
}
// The scale's exponent by search: the least e with amax 2^-e <= max.
int least_exponent(float amax, float max) {
  int e = -126;
  while (std::ldexp(static_cast<double>(amax), -e) > max) ++e;
  return e;
}
}  // namespace

TEST(Fp8Products, RoundingMatchesTheFormatsTables) {
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const auto t = table(f);
    const float max = kernels::cpu::fp8_max(f);
    ASSERT_EQ(max, static_cast<float>(t.back().first));
    std::vector<float> v = {0.0f, -0.0f, 1.0f, max, -max, max * 1.01f, 1e30f, 0.1f, 1.0f / 3};
    for (const auto& [val, code] : t) {  // every value, and the midpoints to its neighbour (ties), and near them
      const float x = static_cast<float>(val);
      v.insert(v.end(), {x, -x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)});
    }
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      const float mid = static_cast<float>((t[i].first + t[i + 1].first) / 2);
      v.insert(v.end(), {mid, -mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)});
    }
    std::mt19937_64 g(11);
    std::uniform_real_distribution<float> e(-24.0f, 17.0f);
    for (int i = 0; i < 4000; ++i) v.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(e(g)));
    for (float x : v) {
      const float got = kernels::cpu::round_fp8(x, f), want = oracle(x, t);
      ASSERT_EQ(got, want) << (f == Fp8Format::E4M3 ? "E4M3" : "E5M2") << " x = " << std::hexfloat << x;
      ASSERT_EQ(std::signbit(got), std::signbit(x)) << std::hexfloat << x;
    }
  }
}

TEST(Fp8Products, RowsScaleByTheLeastPowerOfTwoThatFits) {
  const int64_t rows = 7, cols = 45;  // odd shapes
  auto x = test::randv(rows * cols, 5);
  for (int64_t j = 0; j < cols; ++j) {
    x[1 * cols + j] *= 1e-6f;  // a row of small values: scaled up
    x[2 * cols + j] *= 3e4f;   // and of large ones: scaled down
    x[3 * cols + j] = 0.0f;    // zeros stay zero
  }
  x[4 * cols + 9] = INFINITY;  // a row with inf is passed through as it is
  x[5 * cols] = 1e-30f;        // within 2^-9 (E4M3's smallest) of nothing: flushed to zero by its row's scale
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const auto t = table(f);
    const float max = kernels::cpu::fp8_max(f);
    std::vector<float> out(rows * cols), amax(rows);
    kernels::cpu::fp8_rows(out.data(), x.data(), rows, cols, f, {}, amax.data());
    for (int64_t r = 0; r < rows; ++r) {
      const float* s = x.data() + r * cols;
      if (r == 4) {
        EXPECT_EQ(0, std::memcmp(s, out.data() + r * cols, cols * sizeof(float)));
        continue;
      }
      float m = 0.0f;
      for (int64_t j = 0; j < cols; ++j) m = std::max(m, std::fabs(s[j]));
      const int e = m > 0 ? least_exponent(m, max) : 0;
      for (int64_t j = 0; j < cols; ++j) {
        const float want = m > 0 ? std::ldexp(oracle(std::ldexp(s[j], -e), t), e) : 0.0f;
        ASSERT_EQ(out[r * cols + j], want) << "row " << r << " col " << j;
      }
    }
    EXPECT_EQ(out[5 * cols], 0.0f);
  }
}

TEST(Fp8Products, AReducedRowMaximumMovesTheScale) {
  // A row split over ranks: its maximum is the group's. Here the "other part" holds 2^12 times this one's maximum,
  // so this part's small values fall below E4M3's range (2^-9 of the scale's unit) and its rounding changes.
  const int64_t rows = 3, cols = 16;
  auto x = test::randv(rows * cols, 9);
  std::vector<float> alone(rows * cols), split(rows * cols), amax(rows);
  kernels::cpu::fp8_rows(alone.data(), x.data(), rows, cols, Fp8Format::E4M3, {}, amax.data());
  std::vector<float> local(rows);
  int calls = 0;
  struct Ctx {
    std::vector<float>* local;
    int* calls;
  } ctx{&local, &calls};
  const kernels::Fp8RowMax reduce{[](void* c, float* a, int64_t n) {
                                    auto* k = static_cast<Ctx*>(c);
                                    ++*k->calls;
                                    k->local->assign(a, a + n);
                                    for (int64_t i = 0; i < n; ++i) a[i] *= 4096.0f;
                                  },
                                  &ctx};
  kernels::cpu::fp8_rows(split.data(), x.data(), rows, cols, Fp8Format::E4M3, reduce, amax.data());
  EXPECT_EQ(calls, 1);
  for (int64_t r = 0; r < rows; ++r) {
    float m = 0.0f;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, std::fabs(x[r * cols + j]));
    EXPECT_EQ(local[r], m) << "the reduction is given each row's own maximum";
    EXPECT_EQ(amax[r], 4096.0f * m);
  }
  EXPECT_NE(0, std::memcmp(alone.data(), split.data(), alone.size() * sizeof(float)));
}

TEST(Fp8Products, TensorwiseScalesEveryRowByTheReducedTensorMaximum) {
  // One scale for the block: the largest row maximum, handed to the tensorwise reduction (which the row
  // reduction passed in is not), so a small row's values sit lower in the format than its own scale would put them.
  const int64_t rows = 5, cols = 23;
  auto x = test::randv(rows * cols, 13);
  for (int64_t j = 0; j < cols; ++j) x[2 * cols + j] *= 1e-9f;  // a small row: below both formats' normals there
  struct Ctx {
    int calls = 0;
    float seen = 0, raise = 1;
  } ctx;
  const kernels::Fp8RowMax tensor{[](void* c, float* a, int64_t n) {
                                    auto* k = static_cast<Ctx*>(c);
                                    ++k->calls;
                                    EXPECT_EQ(n, 1);
                                    k->seen = a[0];
                                    a[0] *= k->raise;
                                  },
                                  &ctx};
  int row_calls = 0;
  const kernels::Fp8RowMax rows_reduce{[](void* c, float*, int64_t) { ++*static_cast<int*>(c); }, &row_calls};
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (float raise : {1.0f, 64.0f}) {  // the other ranks' maximum: this rank's, then 64 times it
      const auto t = table(f);
      std::vector<float> out(rows * cols), amax(rows), rowwise(rows * cols);
      kernels::cpu::fp8_rows(rowwise.data(), x.data(), rows, cols, f, {}, amax.data());
      ctx = Ctx{0, 0, raise};
      {
        const kernels::Fp8TensorwiseScope tw({true, tensor});
        const kernels::Fp8Scope on(true);  // a block's scope keeps the tensorwise choice
        kernels::cpu::fp8_rows(out.data(), x.data(), rows, cols, f, rows_reduce, amax.data());
      }
      float m = 0.0f;
      for (float v : x) m = std::max(m, std::fabs(v));
      EXPECT_EQ(ctx.calls, 1);
      EXPECT_EQ(ctx.seen, m);
      const int e = least_exponent(m * raise, kernels::cpu::fp8_max(f));
      for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(out[i], std::ldexp(oracle(std::ldexp(x[i], -e), t), e)) << i;
      EXPECT_NE(0, std::memcmp(out.data() + 2 * cols, rowwise.data() + 2 * cols, cols * sizeof(float)))
          << "the small row keeps its own scale rowwise only";
    }
  }
  EXPECT_EQ(row_calls, 0);
  EXPECT_FALSE(kernels::fp8_context().tensorwise.on) << "the scope ends";
  // A tensor holding inf is passed through as it is.
  x[7] = INFINITY;
  std::vector<float> out(rows * cols), amax(rows);
  {
    const kernels::Fp8TensorwiseScope tw({true, {}});
    kernels::cpu::fp8_rows(out.data(), x.data(), rows, cols, Fp8Format::E4M3, {}, amax.data());
  }
  EXPECT_EQ(0, std::memcmp(out.data(), x.data(), out.size() * sizeof(float)));
}

TEST(Fp8Products, MatmulIsTheFp32GemmOfRoundedRows) {
  const int64_t N = 37, IN = 29, OUT = 19;  // odd shapes
  auto x = test::randv(N * IN, 1), w = test::randv(OUT * IN, 2, 0.2f), b = test::randv(OUT, 3),
       dy = test::randv(N * OUT, 4, 1e-3f);
  auto rows = [](const std::vector<float>& v, int64_t r, int64_t c, Fp8Format f) {
    std::vector<float> out(v.size()), amax(r);
    kernels::cpu::fp8_rows(out.data(), v.data(), r, c, f, {}, amax.data());
    return out;
  };
  auto bf16 = [](std::vector<float> v) {
    kernels::cpu::round_to_bf16_values(v.data(), v.data(), static_cast<int64_t>(v.size()));
    return v;
  };
  const auto xq = rows(x, N, IN, Fp8Format::E4M3), wq = rows(w, OUT, IN, Fp8Format::E4M3),
             dq = rows(dy, N, OUT, Fp8Format::E5M2);
  std::vector<float> got(N * OUT), want(N * OUT), dx(N * IN), dx_want(N * IN), dw(OUT * IN, 0.5f),
      dw_want(OUT * IN, 0.5f), db(OUT, 0.0f), db_want(OUT, 0.0f);
  {
    const kernels::Fp8Scope on(true);
    kernels::cpu::matmul_forward_fp8p(got.data(), x.data(), w.data(), b.data(), N, IN, OUT);
    kernels::cpu::matmul_backward_fp8p(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IN, OUT);
  }
  kernels::cpu::matmul_forward(want.data(), xq.data(), wq.data(), b.data(), N, IN, OUT);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  kernels::cpu::matmul_backward(dx_want.data(), dw_want.data(), nullptr, dq.data(), xq.data(), wq.data(), N, IN, OUT);
  kernels::cpu::matmul_backward(nullptr, nullptr, db_want.data(), dy.data(), nullptr, nullptr, N, IN, OUT);
  EXPECT_EQ(0, std::memcmp(dx.data(), dx_want.data(), dx.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dw.data(), dw_want.data(), dw.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(db.data(), db_want.data(), db.size() * sizeof(float))) << "the bias gradient stays fp32";
  // Outside a scope (the head, the policy's bf16 blocks): bf16-rounded operands.
  ASSERT_FALSE(kernels::fp8_context().on);
  kernels::cpu::matmul_forward_fp8p(got.data(), x.data(), w.data(), b.data(), N, IN, OUT);
  kernels::cpu::matmul_forward(want.data(), bf16(x).data(), bf16(w).data(), b.data(), N, IN, OUT);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}
