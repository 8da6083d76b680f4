// Which GELU does cuBLASLt's GELU epilogue compute: the exact form
// 0.5 x (1 + erf(x / sqrt 2)) that parallm's GPT-2 (and nanoGPT) use, or the
// tanh approximation? One small bf16 GEMM with fp32 output, D = GELU(A B),
// against both forms of the host's fp32 product; the closer one is the
// epilogue's (the two differ by up to ~4e-4, the GEMM's rounding is ~1e-6).
// Built by pack.sh, run by `gpu_check.sh probe`.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                        \
  do {                                                                  \
    if ((x) != 0) {                                                     \
      std::printf("FAIL %s at line %d (%d)\n", #x, __LINE__, (int)(x)); \
      return 1;                                                         \
    }                                                                   \
  } while (0)

int main() {
  const int M = 64, N = 64, K = 64;  // column-major D[M, N] = A[M, K] B[K, N]
  std::vector<__nv_bfloat16> a(M * K), b(K * N);
  std::vector<float> af(M * K), bf(K * N);
  unsigned s = 12345;
  auto rnd = [&] {
    s = s * 1664525u + 1013904223u;
    return (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 1.2f;
  };
  for (int i = 0; i < M * K; ++i) {
    a[i] = __float2bfloat16(rnd());
    af[i] = __bfloat162float(a[i]);
  }
  for (int i = 0; i < K * N; ++i) {
    b[i] = __float2bfloat16(rnd());
    bf[i] = __bfloat162float(b[i]);
  }
  void *da, *db, *dd;
  CHECK(cudaMalloc(&da, a.size() * 2));
  CHECK(cudaMalloc(&db, b.size() * 2));
  CHECK(cudaMalloc(&dd, M * N * 4));
  CHECK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  cublasLtHandle_t h;
  CHECK(cublasLtCreate(&h));
  cublasLtMatmulDesc_t desc;
  CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, K, M));
  CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K));
  CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, M, N, M));
  const float alpha = 1.0f, beta = 0.0f;
  CHECK(cublasLtMatmul(h, desc, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld, nullptr, nullptr, 0, 0));
  std::vector<float> d(M * N);
  CHECK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
  double err_exact = 0, err_tanh = 0, gap = 0;
  for (int j = 0; j < N; ++j)
    for (int i = 0; i < M; ++i) {
      double x = 0;
      for (int k = 0; k < K; ++k) x += static_cast<double>(af[i + k * M]) * bf[k + j * K];
      const double exact = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
      const double tanh_form = 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      err_exact = std::fmax(err_exact, std::fabs(d[i + j * M] - exact));
      err_tanh = std::fmax(err_tanh, std::fabs(d[i + j * M] - tanh_form));
      gap = std::fmax(gap, std::fabs(exact - tanh_form));
    }
  std::printf("cuBLASLt GELU epilogue: max |D - exact| = %.3g, max |D - tanh form| = %.3g (forms differ by %.3g): %s\n",
              err_exact, err_tanh, gap, err_exact < err_tanh ? "EXACT (erf)" : "TANH approximation");
  return 0;
}
