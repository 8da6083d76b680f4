// Optimized RoPE + grouped-query packing (rope.h): rows in parallel; each
// row's heads rotated with the row's table entry, vectorized over the half
// head. Backward sums each KV head's query heads in head order, as the
// reference does, so the bits do not depend on the thread count.
#include "kernels/rope.h"

#include <cstring>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
// y = rot(x) (sign 1) or its transpose (sign -1); cs: the row's cos | sin, null: none. acc: y +=.
PARALLM_CLONES void rot(float* y, const float* x, const float* cs, int64_t D, float sign, bool acc) {
  const int64_t h = D / 2;
  if (!cs) {
    for (int64_t i = 0; i < D; ++i) y[i] = acc ? y[i] + x[i] : x[i];
    return;
  }
  const float* c = cs;
  const float* s = cs + h;
  for (int64_t i = 0; i < h; ++i) {
    const float a = x[i], b = x[i + h], si = sign * s[i];
    const float y0 = a * c[i] - b * si, y1 = b * c[i] + a * si;
    y[i] = acc ? y[i] + y0 : y0;
    y[i + h] = acc ? y[i + h] + y1 : y1;
  }
}
}  // namespace

void rope_pack_forward(float* qkv, const float* q, const float* k, const float* v, const float* rope, int64_t B,
                       int64_t T, int64_t H, int64_t KV, int64_t D) {
  PARALLM_PROFILE("rope_pack_forward");
  const int64_t C = H * D, Ck = KV * D, g = H / KV;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < B * T; ++n) {
    const float* cs = rope ? rope + (n % T) * D : nullptr;
    float* row = qkv + n * 3 * C;
    for (int64_t h = 0; h < H; ++h) {
      rot(row + h * D, q + n * C + h * D, cs, D, 1.0f, false);
      rot(row + C + h * D, k + n * Ck + h / g * D, cs, D, 1.0f, false);
      std::memcpy(row + 2 * C + h * D, v + n * Ck + h / g * D, static_cast<size_t>(D) * sizeof(float));
    }
  }
}

void rope_pack_backward(float* dq, float* dk, float* dv, const float* dqkv, const float* rope, int64_t B, int64_t T,
                        int64_t H, int64_t KV, int64_t D) {
  PARALLM_PROFILE("rope_pack_backward");
  const int64_t C = H * D, Ck = KV * D, g = H / KV;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < B * T; ++n) {
    const float* cs = rope ? rope + (n % T) * D : nullptr;
    const float* row = dqkv + n * 3 * C;
    for (int64_t h = 0; h < H; ++h) {
      rot(dq + n * C + h * D, row + h * D, cs, D, -1.0f, false);
      rot(dk + n * Ck + h / g * D, row + C + h * D, cs, D, -1.0f, h % g != 0);
      rot(dv + n * Ck + h / g * D, row + 2 * C + h * D, nullptr, D, 1.0f, h % g != 0);
    }
  }
}

}  // namespace parallm::kernels::cpu
