// bf16 products on the CPU, for `train.dtype=bf16` there: GEMMs whose inputs
// are rounded to bf16 (nearest even) and whose products accumulate in fp32,
// with fp32 results. oneDNN runs them on AMX tiles (or AVX-512 BF16) where the
// CPU has them; on a Sapphire Rapids core that is 2-4x the fp32 GEMM's speed.
// Activations stay fp32: a layer converts its GEMM operands into bf16 scratch
// buffers just before the product (one pass over memory, small beside the
// product's K reuse), so every other kernel is the fp32 one.
// Primitives are created once per shape and cached (creation costs ms).
// Only AMX or AVX-512 BF16 count as bf16 hardware: oneDNN's emulation on
// plain AVX-512 would be slower than fp32.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace parallm::kernels::cpu {

// Whether this CPU runs oneDNN's bf16 matmul on hardware (AMX or AVX-512
// BF16), not in a reference loop; and the implementation's name for logs.
bool bf16_products_supported();
std::string bf16_products_impl();

// dst[r, c] = bf16(src[r * ld + c]) for a rows x cols block; dst is dense
// (row stride cols). Rounds to nearest even; NaN stays NaN.
void to_bf16(bfloat16* dst, const float* src, int64_t rows, int64_t cols, int64_t ld);

// Row-major C[M,N] (fp32) = op(A) @ op(B) + beta * C with bf16 A and B
// stored dense (row stride K or M for A as given by trans_a, likewise B) and
// fp32 accumulation; beta is 0 or 1. Runs on the OpenMP pool; call it from
// outside parallel regions.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bfloat16* A, const bfloat16* B,
               float beta, float* C, int64_t ldc);

// The same product from fp32 operands (strides as in kernels::sgemm): the
// operands are converted into scratch buffers first. alpha must be 1.
void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// A bf16 copy of an fp32 buffer (the model's parameters, redrawn once after
// each optimizer step) that the bf16-product kernels read instead of rounding
// the same weights again for every product. While a scope lives on a thread,
// an operand there that lies wholly inside [base, base + n) is read from the
// copy at the same offset: the same rounding, so results are bitwise those of
// converting. The owner keeps the copy current while the scope lives. Scopes
// nest (the innermost is searched first, then the ones around it).
class Bf16CopyScope {
 public:
  Bf16CopyScope(const float* base, const bfloat16* copy, int64_t n);
  ~Bf16CopyScope();
  Bf16CopyScope(const Bf16CopyScope&) = delete;
  Bf16CopyScope& operator=(const Bf16CopyScope&) = delete;
  // The copy of src[0, n) under this thread's scopes, or nullptr.
  static const bfloat16* find(const float* src, int64_t n);

 private:
  const float* base_;
  const bfloat16* copy_;
  int64_t n_;
  const Bf16CopyScope* outer_;
};

// The dense fp32 operand src[0, n) in bf16: a scope's copy where one covers
// it, else rounded into scratch slot `slot`.
const bfloat16* bf16_operand(int slot, const float* src, int64_t n);

// Scratch buffer `slot` (0-3) of at least n bf16 values: grown on demand,
// kept and reused (so a training step allocates nothing after its first).
// Accounted as scratch memory. Single-threaded use (the model's thread).
bfloat16* bf16_scratch(int slot, int64_t n);

}  // namespace parallm::kernels::cpu
