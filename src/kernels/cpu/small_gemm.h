// Single-threaded GEMM for the small matrices inside fused kernels (attention
// tiles), where a BLAS call's fixed overhead costs more than the math.
// Row-major C[M x N] = (accumulate ? C : 0) + alpha * A[M x K] @ B[K x N].
// The micro-kernel keeps a tile of C in vector registers and streams rows of
// B; the tile is sized to the register file of the ISA chosen at run time
// (8 x 32 on AVX-512, 6 x 16 on AVX2, 6 x 8 on baseline x86-64; simd::isa()).
#pragma once
#include <cstdint>

namespace parallm::kernels::cpu {

void small_gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                float* C, int64_t ldc, bool accumulate);
// Same with A stored transposed: A is [K x M] (row stride lda), C = alpha * A^T @ B.
void small_gemm_tn(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                   int64_t ldb, float* C, int64_t ldc, bool accumulate);

// dst[c * ld_dst + r] = src[r * ld_src + c] for r < rows, c < cols.
void transpose(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols);

}  // namespace parallm::kernels::cpu
