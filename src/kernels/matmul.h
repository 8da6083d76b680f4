// Contract: linear layers and raw GEMM. Weights use the torch layout [OUT, IN]:
//   out[N, OUT] = inp[N, IN] @ weight[OUT, IN]^T + bias[OUT]
#pragma once
#include <cstdint>
#include <string>

namespace parallm::kernels {

// The GEMM library underneath, with its version ("oneDNN 3.0.0"), for diagnostics.
std::string gemm_library();

// Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.
// lda/ldb/ldc are the row strides of A, B, C as stored.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

namespace ref {
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT);
// dinp (overwritten, may be null) = dout @ weight; dweight += dout^T @ inp; dbias += colsum(dout) (may be null).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IN, int64_t OUT);
}  // namespace ref

namespace cpu {
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IN, int64_t OUT);
}  // namespace cpu

}  // namespace parallm::kernels
