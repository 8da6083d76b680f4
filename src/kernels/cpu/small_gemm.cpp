#include "kernels/cpu/small_gemm.h"

#include <cstring>
#include <utility>

#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {

using simd::load16;
using simd::store16;
using simd::v16;

constexpr int kMR = 8;   // rows of C per tile
constexpr int kNR = 32;  // columns of C per tile (two 16-float vectors)

// A's element (row i, depth k) is A[i * sa + k * sk]: (lda, 1) plain, (1, lda) transposed.
// MR x 32 tile: 2*MR accumulators in vector registers, B rows streamed once.
template <int MR>
__attribute__((always_inline)) inline void tile_full(int64_t K, float alpha, const float* A, int64_t sa, int64_t sk,
                                                     const float* B, int64_t ldb, float* C, int64_t ldc, bool acc) {
  v16 c[MR][2] = {};
  for (int64_t k = 0; k < K; ++k) {
    const v16 b0 = load16(B + k * ldb), b1 = load16(B + k * ldb + 16);
    const float* ak = A + k * sk;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float a = ak[r * sa];
      c[r][0] += a * b0;
      c[r][1] += a * b1;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < 2; ++h) {
      float* dst = C + r * ldc + 16 * h;
      v16 v = alpha * c[r][h];
      store16(dst, acc ? load16(dst) + v : v);
    }
}

// Any tile up to kMR x 32 (edges): plain loops.
__attribute__((always_inline)) inline void tile_edge(int64_t mr, int64_t nr, int64_t K, float alpha, const float* A,
                                                     int64_t sa, int64_t sk, const float* B, int64_t ldb, float* C,
                                                     int64_t ldc, bool acc) {
  float c[kMR][kNR] = {};
  for (int64_t k = 0; k < K; ++k)
    for (int64_t r = 0; r < mr; ++r) {
      const float a = A[r * sa + k * sk];
      for (int64_t j = 0; j < nr; ++j) c[r][j] += a * B[k * ldb + j];
    }
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) C[r * ldc + j] = (acc ? C[r * ldc + j] : 0.0f) + alpha * c[r][j];
}

PARALLM_CLONES void small_gemm_impl(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t sa,
                                    int64_t sk, const float* B, int64_t ldb, float* C, int64_t ldc, bool acc) {
  for (int64_t j0 = 0; j0 < N; j0 += kNR) {
    const int64_t nr = N - j0 < kNR ? N - j0 : kNR;
    for (int64_t i0 = 0; i0 < M; i0 += kMR) {
      const int64_t mr = M - i0 < kMR ? M - i0 : kMR;
      if (mr == kMR && nr == kNR)
        tile_full<kMR>(K, alpha, A + i0 * sa, sa, sk, B + j0, ldb, C + i0 * ldc + j0, ldc, acc);
      else
        tile_edge(mr, nr, K, alpha, A + i0 * sa, sa, sk, B + j0, ldb, C + i0 * ldc + j0, ldc, acc);
    }
  }
}

typedef int32_t v16i __attribute__((vector_size(64)));

// Exchanges bit `b` of the row and column index inside a 16 x 16 tile held as
// 16 row vectors: rows i and i + b trade their off-diagonal b-wide blocks.
// Applying it for b = 8, 4, 2, 1 transposes the tile (each pass swaps one bit).
// Shuffle indices of swap_bit: element j of row i (bit b clear) and of row
// i + b (bit b set); 0..15 pick from row i, 16..31 from row i + b.
template <int b, bool upper, int... j>
constexpr v16i swap_mask(std::integer_sequence<int, j...>) {
  return v16i{(upper ? ((j & b) ? 16 + j : j + b) : ((j & b) ? 16 + j - b : j))...};
}

template <int b>
__attribute__((always_inline)) inline void swap_bit(v16 (&R)[16]) {
  constexpr auto idx = std::make_integer_sequence<int, 16>{};
  constexpr v16i lo = swap_mask<b, false>(idx), hi = swap_mask<b, true>(idx);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    if (!(i & b)) {
      const v16 a = R[i], c = R[i + b];
      R[i] = __builtin_shuffle(a, c, lo);
      R[i + b] = __builtin_shuffle(a, c, hi);
    }
}

PARALLM_CLONES void transpose_impl(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows,
                                   int64_t cols) {
  const int64_t rows16 = rows / 16 * 16, cols16 = cols / 16 * 16;
  // Full 16 x 16 tiles in vector registers.
  for (int64_t r0 = 0; r0 < rows16; r0 += 16)
    for (int64_t c0 = 0; c0 < cols16; c0 += 16) {
      v16 R[16];
      for (int i = 0; i < 16; ++i) R[i] = load16(src + (r0 + i) * ld_src + c0);
      swap_bit<8>(R);
      swap_bit<4>(R);
      swap_bit<2>(R);
      swap_bit<1>(R);
      for (int i = 0; i < 16; ++i) store16(dst + (c0 + i) * ld_dst + r0, R[i]);
    }
  // Ragged right and bottom edges element by element.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < rows16 ? cols16 : 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
}

}  // namespace

void small_gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                float* C, int64_t ldc, bool accumulate) {
  small_gemm_impl(M, N, K, alpha, A, lda, 1, B, ldb, C, ldc, accumulate);
}

void small_gemm_tn(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                   int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  small_gemm_impl(M, N, K, alpha, A, 1, lda, B, ldb, C, ldc, accumulate);
}

void transpose(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols) {
  transpose_impl(dst, ld_dst, src, ld_src, rows, cols);
}

}  // namespace parallm::kernels::cpu
