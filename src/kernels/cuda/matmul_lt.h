// Internal to kernels/cuda: cuBLAS error checks shared by the GEMM files, and
// the bf16 linear layer with its bias fused into the GEMM's epilogue
// (cuBLASLt), used by matmul_forward.
#pragma once
#include <cublas_v2.h>

#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels::cuda {

// Throws CudaError naming the call, the device and the process.
void check_cublas(cublasStatus_t st, const char* where, const char* call);

// out[N, OUT] = residual + inp[N, IN] @ weight[OUT, IN]^T + bias, fp32
// accumulation, the bias (in the epilogue) and the residual (as C, beta = 1)
// added in fp32 before the one rounding to bf16; bias and residual may be
// null. False (nothing done) when cuBLASLt offers no algorithm for the shape;
// the caller then runs the GEMM and separate passes.
bool lt_linear(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias,
               const bfloat16* residual, int64_t N, int64_t IN, int64_t OUT);

// FP8 tensor cores (sm_89 and later): C[M, N] (row-major fp32) = beta C + (sa sb) A[M, K] B[N, K]^T, A and B
// row-major FP8 codes (e4m3: E4M3, else E5M2; not both E5M2) with K contiguous, sa and sb device pointers to
// their dequantization scales; fp32 accumulation (cuBLASLt's, fast accumulation off). False (nothing done)
// where cuBLASLt offers no algorithm; the caller then computes the product another way.
bool lt_fp8_gemm(float* C, const uint8_t* A, bool a_e4m3, const uint8_t* B, bool b_e4m3, int64_t M, int64_t N,
                 int64_t K, const float* sa, const float* sb, float beta);
// Whether lt_fp8_gemm takes that product into C (planned now and kept; A and B from the FP8 scratch, 256-byte
// aligned), so a caller can decide before it spends any work on the operands.
bool lt_fp8_ready(const float* C, bool a_e4m3, bool b_e4m3, int64_t M, int64_t N, int64_t K);
// bf16 activations: D[M, N] (row-major bf16) = residual + (sa sb) A[M, K] B[N, K]^T + bias[N], B E4M3, summed in
// fp32 and rounded to bf16 once; bias (bf16, in the epilogue) and residual (as C, beta 1) may be null. False
// (nothing done) where cuBLASLt offers no algorithm, or the bias is not 16-byte aligned; lt_fp8_linear_ready asks
// first (with the same pointers: D's and the residual's alignment pick the plan).
bool lt_fp8_linear(bfloat16* D, const uint8_t* A, bool a_e4m3, const uint8_t* B, int64_t M, int64_t N, int64_t K,
                   const float* sa, const float* sb, const bfloat16* bias, const bfloat16* residual);
bool lt_fp8_linear_ready(const bfloat16* D, bool a_e4m3, const bfloat16* bias, const bfloat16* residual, int64_t M,
                         int64_t N, int64_t K);

}  // namespace parallm::kernels::cuda
