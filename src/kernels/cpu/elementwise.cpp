// Optimized residual and dropout: fixed-size chunks in parallel. Dropout
// chunks start at multiples of 4 so each Philox block (4 draws) is generated
// once. Strided copies and fills are plain loops (memory-bound, small).
#include "kernels/elementwise.h"

#include <algorithm>

#include "core/dtype.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
constexpr int64_t kChunk = 8192;
PARALLM_CLONES void add_chunk(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
// Element i uses lane g % 4 of the Philox block g / 4, g = base + i (as dropout_keep).
void dropout_chunk(float* out, const float* in, int64_t i0, int64_t n, float p, uint64_t seed, uint64_t stream,
                   uint64_t base) {
  const float scale = 1.0f / (1.0f - p);
  uint64_t g = base + static_cast<uint64_t>(i0);
  auto r = philox4x32(seed, stream, g / 4);
  for (int64_t i = i0; i < i0 + n; ++i, ++g) {
    if (g % 4 == 0) r = philox4x32(seed, stream, g / 4);
    out[i] = u32_to_unit(r[g % 4]) >= p ? in[i] * scale : 0.0f;
  }
}
}  // namespace

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  PARALLM_PROFILE("residual_forward");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk) add_chunk(out + i, a + i, b + i, std::min(kChunk, n - i));
}

void add_inplace(float* acc, const float* x, int64_t n) {
  residual_forward(acc, acc, x, n);
}

void scale_inplace(float* x, int64_t n, float s) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void bias_forward(float* out, const float* bias, int64_t N, int64_t C) {
  PARALLM_PROFILE("bias_forward");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) add_chunk(out + i * C, out + i * C, bias, C);
}

void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t stream, uint64_t base) {
  PARALLM_PROFILE("dropout_forward");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk) dropout_chunk(out, inp, i, std::min(kChunk, n - i), p, seed, stream, base);
}

void dropout_backward(float* dinp, const float* dout, int64_t n, float p, uint64_t seed, uint64_t stream,
                      uint64_t base) {
  dropout_forward(dinp, dout, n, p, seed, stream, base);
}

void copy_rows(float* dst, int64_t dld, const float* src, int64_t sld, int64_t width, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * sld, src + r * sld + width, dst + r * dld);
}
void copy_rows(bfloat16* dst, int64_t dld, const bfloat16* src, int64_t sld, int64_t width, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * sld, src + r * sld + width, dst + r * dld);
}
void fill(float* x, int64_t n, float value) {
  std::fill(x, x + n, value);
}
void fill(bfloat16* x, int64_t n, float value) {
  std::fill(x, x + n, bfloat16{f32_to_bf16(value)});
}

}  // namespace parallm::kernels::cpu
