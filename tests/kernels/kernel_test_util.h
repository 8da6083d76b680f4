// Shared helpers for kernel tests: deterministic random inputs and a
// relative-error comparison that reports where the worst element is.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/rng.h"

namespace parallm::test {

inline std::vector<float> randv(int64_t n, uint64_t s, float scale = 1.0f) {
  std::vector<float> v(n);
  fill_normal(v.data(), n, 0.0f, scale, 1234, stream_id(kRngTest, s));
  return v;
}

// max over i of |got-want| / max(|want_i|, floor * max|want|): relative error,
// except that elements much smaller than the tensor's scale are judged against
// that scale (a sum of many terms can only be as exact as its largest terms).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol, double floor,
                         const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  floor = std::max(floor * scale, 1e-6);
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " non-finite at " << i;
    double e = std::fabs(double(got[i]) - want[i]) / std::max(std::fabs(double(want[i])), floor);
    if (e > worst) {
      worst = e;
      wi = i;
    }
  }
  EXPECT_LE(worst, rtol) << what << ": worst at " << wi << " got " << got[wi] << " want " << want[wi];
}

// C[M,N] (row stride ldc) = beta * C + alpha * op(A) @ op(B), summed in double:
// the reference for GEMMs on row-major operands with row strides lda, ldb.
inline void reference_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const std::vector<float>& A,
                           int64_t lda, const std::vector<float>& B, int64_t ldb, double beta, std::vector<float>& C,
                           int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = static_cast<float>(beta * C[i * ldc + j] + alpha * s);
    }
}

inline double dotv(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Checks analytic d loss / d x[i] against central differences of step h for
// a spread of i (about `samples` of them), at 2e-2 relative.
inline void fd_check(std::vector<float>& x, const std::vector<float>& analytic, const std::function<double()>& loss,
                     const char* what, float h = 1e-2f, size_t samples = 23) {
  ASSERT_EQ(x.size(), analytic.size());
  const size_t stride = std::max<size_t>(1, x.size() / samples);
  for (size_t i = 0; i < x.size(); i += stride) {
    const float keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    const double num = (lp - lm) / (2.0 * h);
    EXPECT_NEAR(analytic[i], num, 2e-2 * std::max(1.0, std::fabs(num))) << what << " index " << i;
  }
}

}  // namespace parallm::test
