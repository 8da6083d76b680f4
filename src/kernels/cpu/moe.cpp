// Mixture-of-experts routing and token movement on the CPU (moe.h). One row
// function per operation, shared by the reference (a serial loop over rows)
// and the optimized kernels (the rows in parallel): every output row is
// computed by one thread in a fixed order, so both give the same bits for any
// thread count; the kernel tests check them against a dense formulation and
// finite differences instead.
#include "kernels/moe.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"

namespace parallm::kernels {

namespace {

constexpr int64_t kMaxE = 1024;  // model::kMaxExperts

// The scores of one token's logits into s[0, E); returns logsumexp(z).
float scores(float* s, const float* z, int64_t E, MoeScore kind) {
  float m = z[0];
  for (int64_t e = 1; e < E; ++e) m = std::max(m, z[e]);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(z[e] - m));
  const float lse = m + static_cast<float>(std::log(sum));
  for (int64_t e = 0; e < E; ++e)
    s[e] = kind == MoeScore::Softmax ? std::exp(z[e] - lse) : 1.0f / (1.0f + std::exp(-z[e]));
  return lse;
}

void route_row(float* w, int32_t* ids, float* lse, const float* z, const float* bias, int64_t E, int64_t K,
               MoeRouting r) {
  float s[kMaxE];
  bool taken[kMaxE] = {};
  *lse = scores(s, z, E, r.score);
  float sum = 0.0f;
  for (int64_t j = 0; j < K; ++j) {
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      if (taken[e]) continue;
      const float v = bias ? s[e] + bias[e] : s[e];
      if (best < 0 || v > bv) {  // strict: ties go to the lower index
        best = e;
        bv = v;
      }
    }
    taken[best] = true;
    ids[j] = static_cast<int32_t>(best);
    w[j] = s[best];
    sum += s[best];
  }
  for (int64_t j = 0; j < K; ++j) w[j] = (r.norm ? w[j] / sum : w[j]) * r.scale;
}

void route_backward_row(float* dz, const float* dw, const float* z, const int32_t* ids, float lse, const float* aux,
                        float z_scale, int64_t E, int64_t K, MoeRouting r) {
  float s[kMaxE], ds[kMaxE];
  scores(s, z, E, r.score);
  std::fill(ds, ds + E, 0.0f);
  if (r.norm) {
    float S = 0.0f, dot = 0.0f;
    for (int64_t j = 0; j < K; ++j) S += s[ids[j]];
    for (int64_t j = 0; j < K; ++j) dot += r.scale * dw[j] * (s[ids[j]] / S);
    for (int64_t j = 0; j < K; ++j) ds[ids[j]] += (r.scale * dw[j] - dot) / S;
  } else {
    for (int64_t j = 0; j < K; ++j) ds[ids[j]] += r.scale * dw[j];
  }
  if (aux && r.score == MoeScore::Softmax) {
    for (int64_t e = 0; e < E; ++e) ds[e] += aux[e];
  } else if (aux) {  // P = s / sum(s)
    float S = 0.0f, dot = 0.0f;
    for (int64_t e = 0; e < E; ++e) S += s[e];
    for (int64_t e = 0; e < E; ++e) dot += aux[e] * (s[e] / S);
    for (int64_t e = 0; e < E; ++e) ds[e] += (aux[e] - dot) / S;
  }
  if (r.score == MoeScore::Softmax) {
    float dot = 0.0f;
    for (int64_t e = 0; e < E; ++e) dot += ds[e] * s[e];
    for (int64_t e = 0; e < E; ++e) dz[e] = s[e] * (ds[e] - dot);
  } else {
    for (int64_t e = 0; e < E; ++e) dz[e] = ds[e] * s[e] * (1.0f - s[e]);
  }
  if (z_scale != 0.0f) {
    const float c = z_scale * 2.0f * lse;
    for (int64_t e = 0; e < E; ++e) dz[e] += c * std::exp(z[e] - lse);
  }
}

void combine_row(float* out, const float* y, const int32_t* slot, const float* w, int64_t K, int64_t C) {
  std::fill(out, out + C, 0.0f);
  for (int64_t j = 0; j < K; ++j) {
    if (slot[j] < 0) continue;
    const float* yr = y + slot[j] * C;
    const float wj = w[j];
    for (int64_t c = 0; c < C; ++c) out[c] += wj * yr[c];
  }
}

void combine_backward_row(float* dy, float* dw, const float* dout, const float* y, const int32_t* slot, const float* w,
                          int64_t K, int64_t C) {
  for (int64_t j = 0; j < K; ++j) {
    if (slot[j] < 0) {
      dw[j] = 0.0f;
      continue;
    }
    float* d = dy + slot[j] * C;
    const float* yr = y + slot[j] * C;
    const float wj = w[j];
    float dot = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      d[c] = wj * dout[c];
      dot += dout[c] * yr[c];
    }
    dw[j] = dot;
  }
}

void scatter_add_row(float* dx, const float* dxp, const int32_t* slot, int64_t K, int64_t C) {
  std::fill(dx, dx + C, 0.0f);
  for (int64_t j = 0; j < K; ++j) {
    if (slot[j] < 0) continue;
    const float* r = dxp + slot[j] * C;
    for (int64_t c = 0; c < C; ++c) dx[c] += r[c];
  }
}

// Rows [0, n) through fn(row): serially (the reference) or in parallel.
template <class F>
void rows(bool parallel, int64_t n, F&& fn) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace

#define PARALLM_MOE_IMPL(NS, PAR)                                                                                      \
  namespace NS {                                                                                                       \
  void moe_route_forward(float* w, int32_t* ids, float* lse, const float* z, const float* bias, int64_t N, int64_t E,  \
                         int64_t K, MoeRouting r) {                                                                    \
    PARALLM_PROFILE("moe_route_forward");                                                                              \
    rows(PAR, N, [&](int64_t t) { route_row(w + t * K, ids + t * K, lse + t, z + t * E, bias, E, K, r); });            \
  }                                                                                                                    \
  void moe_route_backward(float* dz, const float* dw, const float* z, const int32_t* ids, const float* lse,            \
                          const float* aux, float z_scale, int64_t N, int64_t E, int64_t K, MoeRouting r) {            \
    PARALLM_PROFILE("moe_route_backward");                                                                             \
    rows(PAR, N, [&](int64_t t) {                                                                                      \
      route_backward_row(dz + t * E, dw + t * K, z + t * E, ids + t * K, lse[t], aux, z_scale, E, K, r);               \
    });                                                                                                                \
  }                                                                                                                    \
  void moe_gather(float* out, const float* in, const int32_t* src, int64_t n, int64_t C) {                             \
    PARALLM_PROFILE("moe_gather");                                                                                     \
    rows(PAR, n, [&](int64_t i) { std::copy(in + src[i] * C, in + (src[i] + 1) * C, out + i * C); });                  \
  }                                                                                                                    \
  void moe_combine(float* out, const float* y, const int32_t* slot, const float* w, int64_t N, int64_t K, int64_t C) { \
    PARALLM_PROFILE("moe_combine");                                                                                    \
    rows(PAR, N, [&](int64_t t) { combine_row(out + t * C, y, slot + t * K, w + t * K, K, C); });                      \
  }                                                                                                                    \
  void moe_combine_backward(float* dy, float* dw, const float* dout, const float* y, const int32_t* slot,              \
                            const float* w, int64_t N, int64_t K, int64_t C) {                                         \
    PARALLM_PROFILE("moe_combine_backward");                                                                           \
    rows(PAR, N,                                                                                                       \
         [&](int64_t t) { combine_backward_row(dy, dw + t * K, dout + t * C, y, slot + t * K, w + t * K, K, C); });    \
  }                                                                                                                    \
  void moe_scatter_add(float* dx, const float* dxp, const int32_t* slot, int64_t N, int64_t K, int64_t C) {            \
    PARALLM_PROFILE("moe_scatter_add");                                                                                \
    rows(PAR, N, [&](int64_t t) { scatter_add_row(dx + t * C, dxp, slot + t * K, K, C); });                            \
  }                                                                                                                    \
  }
PARALLM_MOE_IMPL(ref, false)
PARALLM_MOE_IMPL(cpu, true)
#undef PARALLM_MOE_IMPL

}  // namespace parallm::kernels
