// Optimized linear layers: GEMM through oneDNN's sgemm, which JIT-dispatches on
// the CPU's ISA (AVX-512 here) independently of any OpenBLAS environment, and
// runs on the same OpenMP pool as our kernels. Inside an OpenMP parallel
// region it runs single-threaded, which attention relies on.
#include "kernels/matmul.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/env.h"
#include "core/error.h"
#include "core/profiler.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/products.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels {

namespace {
// PARALLM_GEMM=parallm selects parallm's packed GEMM (cpu/gemm.h) instead of
// oneDNN. Default oneDNN: on this project's 2-core AVX-512 machines the two
// measured within noise of each other on full training steps (see docs/design.md).
bool use_parallm_gemm() {
  static const bool on = [] { return env::value(env::Var::Gemm) == "parallm"; }();
  return on;
}
}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (use_parallm_gemm() && (beta == 0.0f || beta == 1.0f) && !omp_in_parallel() && M > 0 && N > 0) {
    cpu::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  PARALLM_CHECK(st == dnnl_success, InternalError, "kernels.sgemm",
                "oneDNN sgemm failed (status {}) for M={} N={} K={}", static_cast<int>(st), M, N, K);
}

namespace cpu {

namespace {
PARALLM_CLONES void add_bias_rows(float* out, const float* bias, int64_t rows, int64_t OUT) {
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * OUT;
    for (int64_t j = 0; j < OUT; ++j) o[j] += bias[j];
  }
}
PARALLM_CLONES void colsum_block(float* dbias, const float* dout, int64_t N, int64_t OUT, int64_t j0, int64_t j1) {
  float acc[256];
  int64_t w = j1 - j0;
  std::fill(acc, acc + w, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const float* d = dout + n * OUT + j0;
    for (int64_t j = 0; j < w; ++j) acc[j] += d[j];
  }
  for (int64_t j = 0; j < w; ++j) dbias[j0 + j] += acc[j];
}

// out += bias per row, and dbias += column sums of dout (column blocks of 256
// per task: each column is summed over rows in order, so the result does not
// depend on the thread count).
void add_bias(float* out, const float* bias, int64_t N, int64_t OUT) {
  const int64_t rows_per = 16;
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < N; r0 += rows_per) add_bias_rows(out + r0 * OUT, bias, std::min(rows_per, N - r0), OUT);
}
void bias_grad(float* dbias, const float* dout, int64_t N, int64_t OUT) {
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < OUT; j0 += 256) colsum_block(dbias, dout, N, OUT, j0, std::min(OUT, j0 + 256));
}
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT) {
  PARALLM_PROFILE("matmul_forward");
  sgemm(false, true, N, OUT, IN, 1.0f, inp, IN, weight, IN, 0.0f, out, OUT);
  if (bias) add_bias(out, bias, N, OUT);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  PARALLM_PROFILE("matmul_backward");
  if (dinp) sgemm(false, false, N, IN, OUT, 1.0f, dout, OUT, weight, IN, 0.0f, dinp, IN);
  if (dweight) sgemm(true, false, OUT, IN, N, 1.0f, dout, OUT, inp, IN, 1.0f, dweight, IN);
  if (dbias) bias_grad(dbias, dout, N, OUT);
}

// Low-precision products (products.h: bf16, or fp16 emulated): each operand
// rounded once per call into its own scratch slot (dout serves both products
// of backward), or for bf16 read from the parameters' bf16 copy where the
// model installed one (Bf16CopyScope); the bias and its gradient in fp32.
template <class P>
void matmul_forward_lowp(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT) {
  PARALLM_PROFILE("matmul_forward");
  const auto* x = P::operand(0, inp, N * IN);
  const auto* w = P::operand(1, weight, OUT * IN);
  P::gemm(false, true, N, OUT, IN, x, w, 0.0f, out, OUT);
  if (bias) add_bias(out, bias, N, OUT);
}

template <class P>
void matmul_backward_lowp(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  PARALLM_PROFILE("matmul_backward");
  const auto* d = P::operand(0, dout, N * OUT);
  const auto* x = dweight ? P::operand(1, inp, N * IN) : nullptr;
  const auto* w = dinp ? P::operand(2, weight, OUT * IN) : nullptr;
  if (dinp) P::gemm(false, false, N, IN, OUT, d, w, 0.0f, dinp, IN);
  if (dweight) P::gemm(true, false, OUT, IN, N, d, x, 1.0f, dweight, IN);
  if (dbias) bias_grad(dbias, dout, N, OUT);
}

// FP8 products (fp8.h): inside an FP8 scope each operand's rows scaled and
// rounded (E4M3 for the input and the weight, E5M2 for d(output)), each row's
// maximum reduced over the layer's split where the context gives one; outside
// it bf16-rounded operands (the policy's bf16 layers).
void matmul_forward_fp8p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT) {
  const Fp8Context& c = fp8_context();
  if (!c.on) return matmul_forward_lowp<Bf16RoundedProducts>(out, inp, weight, bias, N, IN, OUT);
  PARALLM_PROFILE("matmul_forward");
  float* amax = lowp_scratch(3, std::max(N, OUT));
  float* x = lowp_scratch(0, N * IN);
  fp8_rows(x, inp, N, IN, Fp8Format::E4M3, c.split_in, amax);
  float* w = lowp_scratch(1, OUT * IN);
  fp8_rows(w, weight, OUT, IN, Fp8Format::E4M3, c.split_in, amax);
  sgemm(false, true, N, OUT, IN, 1.0f, x, IN, w, IN, 0.0f, out, OUT);
  if (bias) add_bias(out, bias, N, OUT);
}

void matmul_backward_fp8p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  const Fp8Context& c = fp8_context();
  if (!c.on) return matmul_backward_lowp<Bf16RoundedProducts>(dinp, dweight, dbias, dout, inp, weight, N, IN, OUT);
  PARALLM_PROFILE("matmul_backward");
  float* amax = lowp_scratch(3, std::max(N, OUT));
  float* d = lowp_scratch(0, N * OUT);
  fp8_rows(d, dout, N, OUT, Fp8Format::E5M2, c.split_out, amax);
  if (dinp) {
    float* w = lowp_scratch(2, OUT * IN);
    fp8_rows(w, weight, OUT, IN, Fp8Format::E4M3, c.split_in, amax);
    sgemm(false, false, N, IN, OUT, 1.0f, d, OUT, w, IN, 0.0f, dinp, IN);
  }
  if (dweight) {
    float* x = lowp_scratch(1, N * IN);
    fp8_rows(x, inp, N, IN, Fp8Format::E4M3, c.split_in, amax);
    sgemm(true, false, OUT, IN, N, 1.0f, d, OUT, x, IN, 1.0f, dweight, IN);
  }
  if (dbias) bias_grad(dbias, dout, N, OUT);
}

void matmul_forward_bf16p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                          int64_t OUT) {
  matmul_forward_lowp<Bf16Products>(out, inp, weight, bias, N, IN, OUT);
}
void matmul_backward_bf16p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                           const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  matmul_backward_lowp<Bf16Products>(dinp, dweight, dbias, dout, inp, weight, N, IN, OUT);
}
void matmul_forward_f16p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT) {
  matmul_forward_lowp<F16Products>(out, inp, weight, bias, N, IN, OUT);
}
void matmul_backward_f16p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  matmul_backward_lowp<F16Products>(dinp, dweight, dbias, dout, inp, weight, N, IN, OUT);
}

}  // namespace cpu
std::string gemm_library() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace parallm::kernels
