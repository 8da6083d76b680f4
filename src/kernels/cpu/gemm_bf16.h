// bf16 products on the CPU, for `train.dtype=bf16` there: GEMMs whose inputs
// are rounded to bf16 (nearest even) and whose products accumulate in fp32,
// with fp32 results. oneDNN runs them on AMX tiles (or AVX-512 BF16) where the
// CPU has them; on a Sapphire Rapids core that is 2-4x the fp32 GEMM's speed.
// Activations stay fp32: a layer converts its GEMM operands into bf16 scratch
// buffers just before the product (one pass over memory, small beside the
// product's K reuse), so every other kernel is the fp32 one.
// Primitives are created once per shape and cached (creation costs ms).
// What the layers above kernels/ use of this (the capability, the dense bf16
// GEMM, the weight copy scope) is declared in the contract kernels/bf16.h and
// implemented in gemm_bf16.cpp; this header adds the CPU-only pieces.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/bf16.h"

namespace parallm::kernels::cpu {

// dst[r, c] = bf16(src[r * ld + c]) for a rows x cols block; dst is dense
// (row stride cols). Rounds to nearest even; NaN stays NaN.
void to_bf16(bfloat16* dst, const float* src, int64_t rows, int64_t cols, int64_t ld);

// kernels::gemm_bf16's product (kernels/bf16.h) from fp32 operands (strides
// as in kernels::sgemm): the operands are converted into scratch buffers
// first. alpha must be 1.
void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The dense fp32 operand src[0, n) in bf16: a weight copy's where a
// kernels::Bf16CopyScope (kernels/bf16.h) covers it, else rounded into
// scratch slot `slot`.
const bfloat16* bf16_operand(int slot, const float* src, int64_t n);

// Scratch buffer `slot` (0-3) of at least n bf16 values: grown on demand,
// kept and reused (so a training step allocates nothing after its first).
// Accounted as scratch memory. Single-threaded use (the model's thread).
bfloat16* bf16_scratch(int slot, int64_t n);

}  // namespace parallm::kernels::cpu
