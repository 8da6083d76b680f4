// The CPU's low-precision products as one policy each, so the linear layers'
// and the classifier's product kernels are written once for both: bf16 products
// (gemm_bf16.h: bf16 operands, oneDNN's bf16 GEMM), fp16 products (f16.h:
// operands rounded to binary16 as fp32 values, the fp32 GEMM) and the same
// with bf16's rounding (the FP8 policy's layers outside FP8). A policy gives
// `operand` (a dense fp32 operand in the product's type, in scratch slot
// `slot` or a weight copy), `rounded` (a chunk of d(logits) rounded, into slot
// 2 or in place) and `gemm` (dense operands, fp32 accumulation into C).
#pragma once
#include <cstdint>

#include "core/profiler.h"
#include "kernels/cpu/f16.h"
#include "kernels/cpu/fp8.h"
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

// Operands rounded to a narrower type's values, kept as fp32 and multiplied by
// the fp32 GEMM: fp16 (f16.h), or bf16 (fp8.h: the FP8 policy's bf16 layers).
template <void (*Round)(float*, const float*, int64_t)>
struct RoundedProducts {
  using T = float;
  static const T* operand(int slot, const float* src, int64_t n) {
    float* d = lowp_scratch(slot, n);
    PARALLM_PROFILE("round_operand");
    Round(d, src, n);
    return d;
  }
  static const T* rounded(float* src, int64_t rows, int64_t cols) {
    PARALLM_PROFILE("round_operand");
    Round(src, src, rows * cols);  // in place: the chunk is not read again
    return src;
  }
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, float beta, float* C,
                   int64_t ldc) {
    sgemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, ldc);
  }
};
inline void round_f16_values(float* dst, const float* src, int64_t n) {
  round_to_f16(dst, src, n);
}
using F16Products = RoundedProducts<&round_f16_values>;
using Bf16RoundedProducts = RoundedProducts<&round_to_bf16_values>;

}  // namespace parallm::kernels::cpu
