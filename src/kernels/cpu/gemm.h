// parallm's own fp32 GEMM for the CPU, BLIS-style: B is packed into KC x 32
// column strips and A into KC x 8 row strips, so the 8 x 32 register-tiled
// micro-kernel (16 accumulators) streams both from contiguous memory, the B
// strip from L1 and the A block from L2, for any of the NN / NT / TN layouts.
// Threads own disjoint slices of C (split along the longer of M and N) and
// each sums its elements in K order, so results do not depend on the thread
// count. Packing buffers are per thread, grown once and reused.
#pragma once
#include <cstdint>

namespace parallm::kernels::cpu {

// Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C, beta in {0, 1}.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace parallm::kernels::cpu
