// Low-precision products on the GPU with fp32 activations (train.dtype=fp16
// or fp8 on cuda), internal to kernels/cuda: the CPU's emulated products
// (cpu/products.h, cpu/fp8.h) computed alike, one policy per rounding, so the
// linear layers' (lowp_products.cu) and the classifier's (classifier.cu)
// products are written once. A policy gives `operand` (a dense fp32 operand
// rounded into device scratch slot `slot`), `rounded` (a chunk of d(logits)
// rounded into slot 2) and `gemm` (fp32 accumulation into C):
//   F16Products:  binary16 values (nearest even, as F16C), held as binary16
//                 and multiplied on fp16 tensor cores with fp32 accumulation:
//                 every product of two such values is exact, as in the CPU's
//                 fp32 GEMM of the same values;
//   Bf16Rounded:  bf16 values (the FP8 policy's bf16 layers and head), held
//                 as bf16 and multiplied on bf16 tensor cores, exact products
//                 with fp32 accumulation, as the CPU's fp32 GEMM of the same
//                 values up to the order of fp32 sums.
// FP8 rows (fp8_rows) are written as bf16 too: a scaled E4M3 or E5M2 value is
// exact in bf16 (but for E5M2 rows whose maximum is below about 4e-31, whose
// smallest steps fall under bf16's), so FP8 products run at bf16's speed
// (not FP8's). A row that is not finite is copied as bf16 (the CPU keeps
// it fp32): its products are not finite either way.
// Tensorwise scaling (train.fp8_scaling=tensorwise) runs FP8 tensor cores
// where it can (sm_89 and later, every dimension a multiple of 16): each
// operand's one scale from its reduced maximum, its FP8 codes (cvt.rn.satfinite:
// cpu/fp8.cpp's rounding) straight or transposed, so that every product has its
// K dimension contiguous as cuBLASLt's FP8 GEMM takes them (matmul_lt.h), and
// the two scales as the GEMM's; fp32 output, accumulated in fp32.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/fp8.h"

namespace parallm::kernels::cuda {

// Device scratch of slot 0..3 per element type (float, bf16, binary16 bits, FP8 codes), grown on demand and kept.
template <class T>
T* lowp_scratch(int slot, int64_t n);

// FP8 rows of src [rows, cols] into dst (bf16 values): each row's absolute
// maximum into amax (inf where the row is not finite), reduced by `reduce`,
// then the row scaled by the power of two 2^-e that fits it to the format
// and rounded (nearest even, subnormals, saturating), times 2^e; rows whose
// maximum is 0 or not finite are copied. cpu::fp8_rows' values bit for bit
// for finite rows.
void fp8_rows(bfloat16* dst, const float* src, int64_t rows, int64_t cols, Fp8Format f, const Fp8RowMax& reduce,
              float* amax);

// Rounding into T (nearest even) and the tensor-core GEMM of two T operands with fp32 accumulation, per type.
void round_to(uint16_t* dst, const float* src, int64_t n);  // binary16 bits
void round_to(bfloat16* dst, const float* src, int64_t n);  // elementwise.h's convert
void lowp_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, const uint16_t* B, float beta,
               float* C, int64_t ldc);
void lowp_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, const bfloat16* B, float beta,
               float* C, int64_t ldc);

// Operands rounded into T (uint16_t: binary16 bits, bfloat16) and multiplied on T's tensor cores.
template <class E>
struct RoundedProducts {
  using T = E;
  static const T* operand(int slot, const float* src, int64_t n) {
    T* d = lowp_scratch<T>(slot, n);
    round_to(d, src, n);
    return d;
  }
  static const T* rounded(float* src, int64_t rows, int64_t cols) { return operand(2, src, rows * cols); }
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, float beta, float* C,
                   int64_t ldc) {
    lowp_gemm(ta, tb, M, N, K, A, B, beta, C, ldc);
  }
};
using F16Products = RoundedProducts<uint16_t>;
using Bf16Rounded = RoundedProducts<bfloat16>;

}  // namespace parallm::kernels::cuda
