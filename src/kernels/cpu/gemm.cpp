#include "kernels/cpu/gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/allocator.h"
#include "core/error.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/small_gemm.h"

namespace parallm::kernels::cpu {

namespace {

constexpr int64_t kMR = 8, kNR = 32;
constexpr int64_t kKC = 128;   // depth of a packed block
constexpr int64_t kMC = 128;   // rows of A per packed block (L2)
constexpr int64_t kNC = 2048;  // columns of B per packed panel

// Packs op(A)[i0 : i0+mc, p0 : p0+kc] into strips of kMR rows: Ap[s][k][r], zero-padded.
PARALLM_CLONES void pack_a(float* Ap, const float* A, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t p0,
                           int64_t kc) {
  for (int64_t s = 0; s < mc; s += kMR) {
    float* dst = Ap + s * kc;
    const int64_t rows = std::min(kMR, mc - s);
    if (trans) {  // A stored [K x M]: 8 contiguous floats per k
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = A + (p0 + k) * lda + i0 + s;
        for (int64_t r = 0; r < kMR; ++r) dst[k * kMR + r] = r < rows ? src[r] : 0.0f;
      }
    } else {  // A stored [M x K]
      for (int64_t r = 0; r < kMR; ++r) {
        const float* src = A + (i0 + s + r) * lda + p0;
        if (r < rows)
          for (int64_t k = 0; k < kc; ++k) dst[k * kMR + r] = src[k];
        else
          for (int64_t k = 0; k < kc; ++k) dst[k * kMR + r] = 0.0f;
      }
    }
  }
}

// Packs op(B)[p0 : p0+kc, j0 : j0+nc] into strips of kNR columns: Bp[s][k][c], zero-padded.
PARALLM_CLONES void pack_b(float* Bp, const float* B, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0,
                           int64_t nc) {
  for (int64_t s = 0; s < nc; s += kNR) {
    float* dst = Bp + s * kc;
    const int64_t cols = std::min(kNR, nc - s);
    if (!trans) {  // B stored [K x N]: 32 contiguous floats per k
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = B + (p0 + k) * ldb + j0 + s;
        for (int64_t c = 0; c < kNR; ++c) dst[k * kNR + c] = c < cols ? src[c] : 0.0f;
      }
    } else {  // B stored [N x K]: column c of op(B) is row c of B
      for (int64_t c = 0; c < kNR; ++c) {
        const float* src = B + (j0 + s + c) * ldb + p0;
        if (c < cols)
          for (int64_t k = 0; k < kc; ++k) dst[k * kNR + c] = src[k];
        else
          for (int64_t k = 0; k < kc; ++k) dst[k * kNR + c] = 0.0f;
      }
    }
  }
}

// The 8 x 32 tile with AVX-512 intrinsics: 16 accumulators, two B loads and
// eight broadcasts per step, everything in registers. Returns the tile in c.
__attribute__((target("avx512f"))) void tile_avx512(const float* ap, const float* bp, int64_t kc, float* out) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(bp + k * kNR), b1 = _mm512_load_ps(bp + k * kNR + 16);
    const float* a = ap + k * kMR;
    __m512 x = _mm512_set1_ps(a[0]);
    c00 = _mm512_fmadd_ps(x, b0, c00);
    c01 = _mm512_fmadd_ps(x, b1, c01);
    x = _mm512_set1_ps(a[1]);
    c10 = _mm512_fmadd_ps(x, b0, c10);
    c11 = _mm512_fmadd_ps(x, b1, c11);
    x = _mm512_set1_ps(a[2]);
    c20 = _mm512_fmadd_ps(x, b0, c20);
    c21 = _mm512_fmadd_ps(x, b1, c21);
    x = _mm512_set1_ps(a[3]);
    c30 = _mm512_fmadd_ps(x, b0, c30);
    c31 = _mm512_fmadd_ps(x, b1, c31);
    x = _mm512_set1_ps(a[4]);
    c40 = _mm512_fmadd_ps(x, b0, c40);
    c41 = _mm512_fmadd_ps(x, b1, c41);
    x = _mm512_set1_ps(a[5]);
    c50 = _mm512_fmadd_ps(x, b0, c50);
    c51 = _mm512_fmadd_ps(x, b1, c51);
    x = _mm512_set1_ps(a[6]);
    c60 = _mm512_fmadd_ps(x, b0, c60);
    c61 = _mm512_fmadd_ps(x, b1, c61);
    x = _mm512_set1_ps(a[7]);
    c70 = _mm512_fmadd_ps(x, b0, c70);
    c71 = _mm512_fmadd_ps(x, b1, c71);
  }
  const __m512 r[16] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71};
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(out + 16 * i, r[i]);
}

// C[mc x nc] (+)= alpha * Ap @ Bp over packed blocks of depth kc.
PARALLM_CLONES void compute_block(const float* Ap, const float* Bp, int64_t mc, int64_t nc, int64_t kc, float alpha,
                                  float* C, int64_t ldc, bool acc) {
  alignas(64) float tile[kMR * kNR];
  // Read per block, not at load: a bad PARALLM_ISA is then an error the CLI
  // reports, not an abort before main (isa() reads the variable once).
  const bool avx512 = simd::isa() == simd::Isa::Avx512;
  for (int64_t js = 0; js < nc; js += kNR) {
    const float* bp = Bp + js * kc;
    const int64_t cols = std::min(kNR, nc - js);
    for (int64_t is = 0; is < mc; is += kMR) {
      const float* ap = Ap + is * kc;
      if (avx512)
        tile_avx512(ap, bp, kc, tile);
      else
        small_gemm_tn(kMR, kNR, kc, 1.0f, ap, kMR, bp, kNR, tile, kNR, false);  // portable: packed A is [kc x kMR]
      const int64_t rows = std::min(kMR, mc - is);
      float* cij = C + is * ldc + js;
      for (int64_t r = 0; r < rows; ++r) {
        float* dst = cij + r * ldc;
        const float* t = tile + r * kNR;
        if (acc)
          for (int64_t q = 0; q < cols; ++q) dst[q] += alpha * t[q];
        else
          for (int64_t q = 0; q < cols; ++q) dst[q] = alpha * t[q];
      }
    }
  }
}

struct PackBuffers {
  Array<float> a{kMC * kKC, MemCategory::Scratch}, b{kNC * kKC, MemCategory::Scratch};
};

// Each thread's own buffers, constructed on its first call (a thread_local
// at function scope is initialized only by threads that pass through it).
PackBuffers& thread_buffers() {
  static thread_local PackBuffers b;
  return b;
}

// One thread's share: C rows [i_begin, i_end) x columns [j_begin, j_end).
void gemm_slice(bool ta, bool tb, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end, int64_t K,
                float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, bool beta_one, float* C,
                int64_t ldc, PackBuffers& buf) {
  for (int64_t jc = j_begin; jc < j_end; jc += kNC) {
    const int64_t nc = std::min(kNC, j_end - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = std::min(kKC, K - pc);
      const bool acc = pc > 0 || beta_one;
      pack_b(buf.b.data(), B, ldb, tb, pc, kc, jc, nc);
      for (int64_t ic = i_begin; ic < i_end; ic += kMC) {
        const int64_t mc = std::min(kMC, i_end - ic);
        pack_a(buf.a.data(), A, lda, ta, ic, mc, pc, kc);
        compute_block(buf.a.data(), buf.b.data(), mc, nc, kc, alpha, C + ic * ldc + jc, ldc, acc);
      }
    }
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  PARALLM_CHECK(beta == 0.0f || beta == 1.0f, InternalError, "kernels.gemm", "beta must be 0 or 1, got {}", beta);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  const bool split_rows = M >= N;
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    // Slices aligned to whole tiles along the split dimension.
    const int64_t unit = split_rows ? kMR : kNR, len = split_rows ? M : N;
    const int64_t units = (len + unit - 1) / unit;
    const int64_t b = std::min(len, units * t / nt * unit), e = std::min(len, units * (t + 1) / nt * unit);
    if (e > b) {
      PackBuffers& buf = thread_buffers();
      if (split_rows)
        gemm_slice(trans_a, trans_b, b, e, 0, N, K, alpha, A, lda, B, ldb, beta == 1.0f, C, ldc, buf);
      else
        gemm_slice(trans_a, trans_b, 0, M, b, e, K, alpha, A, lda, B, ldb, beta == 1.0f, C, ldc, buf);
    }
  }
}

}  // namespace parallm::kernels::cpu
