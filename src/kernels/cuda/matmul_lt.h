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

}  // namespace parallm::kernels::cuda
