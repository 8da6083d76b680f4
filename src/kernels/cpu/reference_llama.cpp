// Reference kernels of the Llama family's layers (rmsnorm.h, rope.h,
// swiglu.h): the plainest loops, in double where it is cheap; the oracle the
// optimized kernels are tested against.
#include <cmath>
#include <vector>

#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace parallm::kernels::ref {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * x[c];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = static_cast<float>(weight[c] * (x[c] * r));
    rstd[n] = static_cast<float>(r);
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    const double r = rstd[n];
    double dot = 0;  // sum_c dy_c w_c x_c
    for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(dy[c]) * weight[c] * x[c];
    for (int64_t c = 0; c < C; ++c) {
      dinp[n * C + c] += static_cast<float>(r * dy[c] * weight[c] - x[c] * r * r * r * dot / static_cast<double>(C));
      dweight[c] += static_cast<float>(dy[c] * (x[c] * r));
    }
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], s = 1.0 / (1.0 + std::exp(-g));
    dgate[i] = static_cast<float>(dout[i] * up[i] * s * (1.0 + g * (1.0 - s)));
    dup[i] = static_cast<float>(dout[i] * g * s);
  }
}

namespace {
// Head x (D values) rotated by row t of the table into y; `sign` -1: the transpose.
void rotate(float* y, const float* x, const float* rope, int64_t t, int64_t D, double sign) {
  const int64_t h = D / 2;
  for (int64_t i = 0; i < h; ++i) {
    const double c = rope ? rope[t * D + i] : 1.0, s = rope ? sign * rope[t * D + h + i] : 0.0;
    const double a = x[i], b = x[i + h];
    y[i] = static_cast<float>(a * c - b * s);
    y[i + h] = static_cast<float>(b * c + a * s);
  }
}
}  // namespace

void rope_pack_forward(float* qkv, const float* q, const float* k, const float* v, const float* rope, int64_t B,
                       int64_t T, int64_t H, int64_t KV, int64_t D) {
  const int64_t C = H * D, Ck = KV * D, g = H / KV;
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t h = 0; h < H; ++h) {
      float* row = qkv + n * 3 * C;
      rotate(row + h * D, q + n * C + h * D, rope, n % T, D, 1.0);
      rotate(row + C + h * D, k + n * Ck + h / g * D, rope, n % T, D, 1.0);
      for (int64_t d = 0; d < D; ++d) row[2 * C + h * D + d] = v[n * Ck + h / g * D + d];
    }
}

void rope_pack_backward(float* dq, float* dk, float* dv, const float* dqkv, const float* rope, int64_t B, int64_t T,
                        int64_t H, int64_t KV, int64_t D) {
  const int64_t C = H * D, Ck = KV * D, g = H / KV;
  std::vector<float> tmp(static_cast<size_t>(D));
  for (int64_t n = 0; n < B * T; ++n) {
    const float* row = dqkv + n * 3 * C;
    for (int64_t d = 0; d < Ck; ++d) dk[n * Ck + d] = dv[n * Ck + d] = 0.0f;
    for (int64_t h = 0; h < H; ++h) {
      rotate(dq + n * C + h * D, row + h * D, rope, n % T, D, -1.0);
      rotate(tmp.data(), row + C + h * D, rope, n % T, D, -1.0);
      for (int64_t d = 0; d < D; ++d) {
        dk[n * Ck + h / g * D + d] += tmp[d];
        dv[n * Ck + h / g * D + d] += row[2 * C + h * D + d];
      }
    }
  }
}

}  // namespace parallm::kernels::ref
