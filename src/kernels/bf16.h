// Contract: bf16 for the layers above kernels/. What a model, the trainer or
// the config checks need of bf16 goes through this header, never through
// cpu/ or cuda/ (the layer check, .ci/check-layers, enforces it):
// - whether this CPU runs bf16 products on hardware, and oneDNN's name for
//   the implementation (for logs and error messages);
// - the dense bf16 GEMM on the host (what `parallm` measures as the CPU's
//   bf16 peak);
// - fp32 -> bf16 conversion of a buffer on its device;
// - Bf16CopyScope, the weight copy the CPU's bf16-product kernels read.
// The CPU implementations are in cpu/gemm_bf16.cpp (with the products that
// use them, cpu/gemm_bf16.h); the GPU's conversion is cuda::convert.
#pragma once
#include <cstdint>
#include <string>

#include "core/device.h"
#include "core/dtype.h"

namespace parallm::kernels {

// Whether this CPU runs oneDNN's bf16 matmul on hardware (AMX or AVX-512
// BF16), not in a reference loop; and the implementation's name for logs.
// Only AMX or AVX-512 BF16 count as bf16 hardware: oneDNN's emulation on
// plain AVX-512 would be slower than fp32.
bool bf16_products_supported();
std::string bf16_products_impl();

// Row-major C[M,N] (fp32) = op(A) @ op(B) + beta * C on the host, with bf16
// A and B stored dense (row stride K or M for A as given by trans_a, likewise
// B) and fp32 accumulation; beta is 0 or 1. Runs on the OpenMP pool; call it
// from outside parallel regions.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bfloat16* A, const bfloat16* B,
               float beta, float* C, int64_t ldc);

// dst[i] = bf16(src[i]) for i < n, both on `dev` (host memory for the CPU, the
// GPU's for a CUDA device, on gpu::stream()). Rounds to nearest even; NaN
// stays NaN. The same rounding on both devices.
void convert_to_bf16(Device dev, bfloat16* dst, const float* src, int64_t n);

// A bf16 copy of an fp32 buffer (the model's parameters, redrawn once after
// each optimizer step) that the CPU's bf16-product kernels read instead of
// rounding the same weights again for every product. While a scope lives on a
// thread, an operand there that lies wholly inside [base, base + n) is read
// from the copy at the same offset: the same rounding, so results are bitwise
// those of converting. The owner keeps the copy current while the scope lives.
// Scopes nest (the innermost is searched first, then the ones around it).
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

}  // namespace parallm::kernels
