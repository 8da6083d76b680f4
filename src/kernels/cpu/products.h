// The CPU's low-precision products as one policy each, so the linear layers'
// and the classifier's product kernels are written once for both: bf16 products
// (gemm_bf16.h: bf16 operands, oneDNN's bf16 GEMM) and fp16 products (f16.h:
// operands rounded to binary16 as fp32 values, the fp32 GEMM). A policy gives
// `operand` (a dense fp32 operand in the product's type, in scratch slot
// `slot` or a weight copy), `rounded` (a chunk of d(logits) rounded, into slot
// 2 or in place) and `gemm` (dense operands, fp32 accumulation into C).
#pragma once
#include <cstdint>

#include "core/profiler.h"
#include "kernels/cpu/f16.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/matmul.h"

namespace parallm::kernels::cpu {

struct Bf16Products {
  using T = bfloat16;
  static const T* operand(int slot, const float* src, int64_t n) { return bf16_operand(slot, src, n); }
  static const T* rounded(float* src, int64_t rows, int64_t cols) {
    T* d = bf16_scratch(2, rows * cols);
    PARALLM_PROFILE("to_bf16");
    to_bf16(d, src, rows, cols, cols);
    return d;
  }
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, float beta, float* C,
                   int64_t ldc) {
    gemm_bf16(ta, tb, M, N, K, A, B, beta, C, ldc);
  }
};

struct F16Products {
  using T = float;
  static const T* operand(int slot, const float* src, int64_t n) { return f16_operand(slot, src, n); }
  static const T* rounded(float* src, int64_t rows, int64_t cols) {
    PARALLM_PROFILE("to_f16");
    round_to_f16(src, src, rows * cols);  // in place: the chunk is not read again
    return src;
  }
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, float beta, float* C,
                   int64_t ldc) {
    sgemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, ldc);
  }
};

}  // namespace parallm::kernels::cpu
