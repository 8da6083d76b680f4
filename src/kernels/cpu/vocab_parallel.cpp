// Vocabulary-parallel embedding and cross-entropy (kernels/vocab_parallel.h):
// the reference loops and the optimized CPU kernels side by side, since they
// are short. Optimized: the embedding forward by rows in parallel; its
// backward by blocks of columns (dwte, rows summed in token order, skipping
// other ranks' tokens) and by positions (dwpe, summed in batch order), as
// embedding_backward does, so there are no atomics and a rank's dwte rows and
// dwpe are the bits embedding_backward gives them, for any thread count. The
// three cross-entropy steps work row by row in parallel, with the
// classifier's vectorized exp (simd::fast_expf) and fp32 sums; the reference
// uses expf and plain loops. Padded columns (j >= valid) are never read.
#include "kernels/vocab_parallel.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels {

namespace {
bool owns(int64_t tok, int64_t v0, int64_t vn) {
  return tok >= v0 && tok < v0 + vn;
}
}  // namespace

namespace ref {

void vp_embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                          int64_t C, int64_t v0, int64_t vn) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tok = tokens[b * T + t];
      const bool mine = owns(tok, v0, vn);
      for (int64_t c = 0; c < C; ++c) {
        float v = 0.0f;
        if (mine && wpe)
          v = wte[(tok - v0) * C + c] + wpe[t * C + c];
        else if (mine)
          v = wte[(tok - v0) * C + c];
        else if (wpe)
          v = wpe[t * C + c];
        out[(b * T + t) * C + c] = v;
      }
    }
}

void vp_embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                           int64_t C, int64_t v0, int64_t vn) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tok = tokens[b * T + t];
      for (int64_t c = 0; c < C; ++c) {
        if (owns(tok, v0, vn)) dwte[(tok - v0) * C + c] += dout[(b * T + t) * C + c];
        if (dwpe) dwpe[t * C + c] += dout[(b * T + t) * C + c];
      }
    }
}

void xent_vp_local_max(float* mx, const float* logits, int64_t N, int64_t vn, int64_t valid) {
  for (int64_t i = 0; i < N; ++i) {
    float m = -INFINITY;
    for (int64_t j = 0; j < valid; ++j) m = std::max(m, logits[i * vn + j]);
    mx[i] = m;
  }
}

void xent_vp_exp_sums(float* sums, const float* logits, const float* mx, const int32_t* targets, int64_t N, int64_t vn,
                      int64_t valid, int64_t v0) {
  for (int64_t i = 0; i < N; ++i) {
    float s = 0.0f;
    for (int64_t j = 0; j < valid; ++j) s += std::exp(logits[i * vn + j] - mx[i]);
    sums[i] = s;
    const int64_t t = targets[i] - v0;
    sums[N + i] = t >= 0 && t < valid ? logits[i * vn + t] : 0.0f;
  }
}

void xent_vp_losses(float* losses, const float* mx, const float* sums, int64_t N) {
  for (int64_t i = 0; i < N; ++i) losses[i] = std::log(sums[i]) + mx[i] - sums[N + i];
}

void xent_vp_grad(float* dlogits, const float* logits, const float* mx, const float* se, const int32_t* targets,
                  int64_t N, int64_t vn, int64_t valid, int64_t v0, float dloss) {
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < vn; ++j) {
      const float onehot = j + v0 == targets[i] ? 1.0f : 0.0f;
      dlogits[i * vn + j] = j < valid ? dloss * (std::exp(logits[i * vn + j] - mx[i]) / se[i] - onehot) : 0.0f;
    }
}

}  // namespace ref

namespace cpu {

namespace {
PARALLM_CLONES void add2(float* out, const float* a, const float* b, int64_t C) {
  for (int64_t c = 0; c < C; ++c) out[c] = a[c] + b[c];
}
PARALLM_CLONES void acc(float* dst, const float* src, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] += src[c];
}

PARALLM_CLONES float row_max(const float* l, int64_t valid) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < valid; ++j) m = l[j] > m ? l[j] : m;
  return m;
}

PARALLM_CLONES float row_exp_sum(const float* l, int64_t valid, float m) {
  const simd::ExpBounds eb;
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < valid; ++j) s += simd::fast_expf(l[j] - m, eb);
  return s;
}

// d = dloss * (exp(l - m) / se - onehot) over the valid columns, 0 after.
PARALLM_CLONES void row_grad(float* d, const float* l, int64_t vn, int64_t valid, float m, float se, int64_t t,
                             float dloss) {
  const simd::ExpBounds eb;
  const float scale = dloss / se;
  for (int64_t j = 0; j < valid; ++j) d[j] = simd::fast_expf(l[j] - m, eb) * scale;
  if (t >= 0 && t < valid) d[t] -= dloss;
  std::fill(d + valid, d + vn, 0.0f);
}
}  // namespace

void vp_embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                          int64_t C, int64_t v0, int64_t vn) {
  PARALLM_PROFILE("vp_embedding_forward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * T; ++r) {
    const int64_t tok = tokens[r];
    const bool mine = owns(tok, v0, vn);
    const float* w = mine ? wte + (tok - v0) * C : nullptr;
    const float* p = wpe ? wpe + (r % T) * C : nullptr;
    float* o = out + r * C;
    if (mine && p)
      add2(o, w, p, C);
    else if (mine)
      std::copy(w, w + C, o);
    else if (p)
      std::copy(p, p + C, o);
    else
      std::fill(o, o + C, 0.0f);
  }
}

void vp_embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                           int64_t C, int64_t v0, int64_t vn) {
  PARALLM_PROFILE("vp_embedding_backward");
  const int64_t kCols = 64;
  const int64_t nblk = (C + kCols - 1) / kCols;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t blk = 0; blk < nblk; ++blk) {
      const int64_t c0 = blk * kCols, w = std::min(kCols, C - c0);
      for (int64_t r = 0; r < B * T; ++r) {
        const int64_t tok = tokens[r];
        if (owns(tok, v0, vn)) acc(dwte + (tok - v0) * C + c0, dout + r * C + c0, w);
      }
    }
    if (dwpe) {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < B; ++b) acc(dwpe + t * C, dout + (b * T + t) * C, C);
    }
  }
}

void xent_vp_local_max(float* mx, const float* logits, int64_t N, int64_t vn, int64_t valid) {
  PARALLM_PROFILE("xent_vp_local_max");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) mx[i] = row_max(logits + i * vn, valid);
}

void xent_vp_exp_sums(float* sums, const float* logits, const float* mx, const int32_t* targets, int64_t N, int64_t vn,
                      int64_t valid, int64_t v0) {
  PARALLM_PROFILE("xent_vp_exp_sums");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* l = logits + i * vn;
    sums[i] = row_exp_sum(l, valid, mx[i]);
    const int64_t t = targets[i] - v0;
    sums[N + i] = t >= 0 && t < valid ? l[t] : 0.0f;
  }
}

void xent_vp_losses(float* losses, const float* mx, const float* sums, int64_t N) {
  for (int64_t i = 0; i < N; ++i) losses[i] = std::log(sums[i]) + mx[i] - sums[N + i];
}

void xent_vp_grad(float* dlogits, const float* logits, const float* mx, const float* se, const int32_t* targets,
                  int64_t N, int64_t vn, int64_t valid, int64_t v0, float dloss) {
  PARALLM_PROFILE("xent_vp_grad");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    row_grad(dlogits + i * vn, logits + i * vn, vn, valid, mx[i], se[i], targets[i] - v0, dloss);
}

}  // namespace cpu

}  // namespace parallm::kernels
