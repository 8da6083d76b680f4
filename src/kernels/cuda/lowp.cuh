// Low-precision products on the GPU with fp32 activations (train.dtype=fp16
// or fp8 on cuda), internal to kernels/cuda: the CPU's emulated products
// (cpu/products.h, cpu/fp8.h) computed alike, one policy per rounding, so the
// linear layers' (lowp_products.cu) and the classifier's (classifier.cu)
// products are written once. A policy gives `operand` (a dense fp32 operand
// rounded into device scratch slot `slot`), `rounded` (a chunk of d(logits)
// rounded, in place or into slot 2) and `gemm` (fp32 accumulation into C):
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
// (not FP8's, yet). A row that is not finite is copied as bf16 (the CPU keeps
// it fp32): its products are not finite either way.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/fp8.h"

namespace parallm::kernels::cuda {

enum class Fp8Kind { E4M3, E5M2 };

// Device scratch of slot 0..3 (per element type), grown on demand and kept.
float* lowp_scratch_f32(int slot, int64_t n);
bfloat16* lowp_scratch_bf16(int slot, int64_t n);
uint16_t* lowp_scratch_f16(int slot, int64_t n);  // binary16 bits

// dst = src rounded to binary16 (its bits), or to bf16.
void round_f16(uint16_t* dst, const float* src, int64_t n);
void round_bf16(bfloat16* dst, const float* src, int64_t n);
// FP8 rows of src [rows, cols] into dst (bf16 values): each row's absolute
// maximum into amax (inf where the row is not finite), reduced by `reduce`,
// then the row scaled by the power of two 2^-e that fits it to the format
// and rounded (nearest even, subnormals, saturating), times 2^e; rows whose
// maximum is 0 or not finite are copied. cpu::fp8_rows' values bit for bit.
void fp8_rows(bfloat16* dst, const float* src, int64_t rows, int64_t cols, Fp8Kind kind, const Fp8RowMax& reduce,
              float* amax);

struct F16Products {
  using T = uint16_t;
  static const T* operand(int slot, const float* src, int64_t n) {
    uint16_t* d = lowp_scratch_f16(slot, n);
    round_f16(d, src, n);
    return d;
  }
  static const T* rounded(float* src, int64_t rows, int64_t cols) { return operand(2, src, rows * cols); }
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, float beta, float* C,
                   int64_t ldc);
};

struct Bf16Rounded {
  using T = bfloat16;
  static const T* operand(int slot, const float* src, int64_t n) {
    bfloat16* d = lowp_scratch_bf16(slot, n);
    round_bf16(d, src, n);
    return d;
  }
  static const T* rounded(float* src, int64_t rows, int64_t cols) { return operand(2, src, rows * cols); }
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, float beta, float* C,
                   int64_t ldc);
};

}  // namespace parallm::kernels::cuda
