// Contract: linear layers and raw GEMM. Weights use the torch layout [OUT, IN]:
//   out[N, OUT] = inp[N, IN] @ weight[OUT, IN]^T + bias[OUT]
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace parallm::kernels {

// The GEMM library underneath, with its version ("oneDNN 3.0.0"), for diagnostics.
std::string gemm_library();
// The vector ISA parallm's own CPU kernels run with ("avx512", "avx2",
// "baseline"): the CPU's widest, or less where PARALLM_ISA caps it.
std::string cpu_kernel_isa();

// Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.
// lda/ldb/ldc are the row strides of A, B, C as stored.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

namespace ref {
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT);
// dinp (overwritten, may be null) = dout @ weight; dweight += dout^T @ inp (may be null);
// dbias += colsum(dout) (may be null). Either half alone gives the bits of the
// whole call: zero-bubble pipelines run the input half (B) and the weight
// half (W) apart. The same contract for every backend below.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IN, int64_t OUT);
}  // namespace ref

namespace cpu {
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IN, int64_t OUT);
// The same with bf16 products: fp32 in and out, operands rounded to bf16 and
// products accumulated in fp32 (see cpu/gemm_bf16.h); dweight and dbias +=.
void matmul_forward_bf16p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                          int64_t OUT);
void matmul_backward_bf16p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                           const float* weight, int64_t N, int64_t IN, int64_t OUT);
// And with fp16 products (emulated: operands rounded to binary16, the fp32 GEMM; see cpu/f16.h).
void matmul_forward_f16p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT);
void matmul_backward_f16p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT);
// And with FP8 products (emulated, cpu/fp8.h; the context in fp8.h): bf16-rounded outside an FP8 scope.
void matmul_forward_fp8p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT);
void matmul_backward_fp8p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT);
}  // namespace cpu

// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IN, int64_t OUT);
// bf16 mixed precision: activations and weights in bf16, tensor-core products
// with fp32 accumulation; dweight and dbias accumulate (+=) in fp32.
void matmul_forward(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias, int64_t N,
                    int64_t IN, int64_t OUT);
void matmul_backward(bfloat16* dinp, float* dweight, float* dbias, const bfloat16* dout, const bfloat16* inp,
                     const bfloat16* weight, int64_t N, int64_t IN, int64_t OUT);
// A linear layer and the residual add after it in one GEMM (cuBLASLt, the
// residual as C with beta = 1, out as D): out = residual + inp @ weight^T +
// bias, summed in fp32 and rounded to bf16 once. out must not alias inp or
// residual. (The model runs this in place of matmul_forward + residual_forward
// where the table offers it.)
void matmul_forward_residual(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias,
                             const bfloat16* residual, int64_t N, int64_t IN, int64_t OUT);
// fp32 activations with fp16 or FP8 products, as the CPU's _f16p and _fp8p (cuda/lowp.cuh): fp16 values on fp16
// tensor cores; FP8 rows (and the FP8 policy's bf16-rounded layers) as bf16 values on bf16 tensor cores; fp32
// accumulation; dweight, dbias +=.
void matmul_forward_f16p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT);
void matmul_backward_f16p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT);
void matmul_forward_fp8p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT);
void matmul_backward_fp8p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT);
// bf16 activations with FP8 products (train.fp8_activations=bf16; GPU only): inside an FP8 scope under
// tensorwise scaling, on sm_89 and later with every dimension a multiple of 16, the operands' FP8 codes are drawn
// from bf16 (E4M3 input and weight, E5M2 d(output)) and multiplied on FP8 tensor cores, out and d(input) written
// in bf16 (bias and residual in the epilogue); anywhere else these are the bf16 products above.
void matmul_forward_fp8b(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias, int64_t N,
                         int64_t IN, int64_t OUT);
void matmul_forward_residual_fp8b(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias,
                                  const bfloat16* residual, int64_t N, int64_t IN, int64_t OUT);
void matmul_backward_fp8b(bfloat16* dinp, float* dweight, float* dbias, const bfloat16* dout, const bfloat16* inp,
                          const bfloat16* weight, int64_t N, int64_t IN, int64_t OUT);
// Under tensorwise scaling (fp8.h) on sm_89 and later, with every dimension a multiple of 16, the _fp8p
// products run FP8 tensor cores (cuBLASLt): how many such GEMMs ran in this process (0 in a CPU-only build).
int64_t fp8_tensor_core_gemms();
// Row-major GEMMs on device pointers (cuBLAS), one name for kernels templated
// on the element type: fp32 (fp32 arithmetic unless allow_tf32(true)), or bf16
// inputs with fp32 accumulation and C in fp32 or bf16. The strided batched form
// runs `batch` GEMMs, the i-th on A + i*stride_a, B + i*stride_b, C + i*stride_c.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                          float* C, int64_t ldc, int64_t stride_c, int64_t batch);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
          const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
          const bfloat16* B, int64_t ldb, float beta, bfloat16* C, int64_t ldc);
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A,
                          int64_t lda, int64_t stride_a, const bfloat16* B, int64_t ldb, int64_t stride_b, float beta,
                          float* C, int64_t ldc, int64_t stride_c, int64_t batch);
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A,
                          int64_t lda, int64_t stride_a, const bfloat16* B, int64_t ldb, int64_t stride_b, float beta,
                          bfloat16* C, int64_t ldc, int64_t stride_c, int64_t batch);
// binary16 A and B (their bits), fp32 C and accumulation (fp16 tensor cores).
void gemm_f16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
              const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);
// fp32 GEMMs may use TF32 tensor cores (about 10 bits of mantissa): off by default.
void allow_tf32(bool on);
// cuBLAS version, for diagnostics ("cuBLAS 13.0.0").
std::string blas_library();
}  // namespace cuda

}  // namespace parallm::kernels
