#include "kernels/cpu/small_gemm.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {

using simd::loadv;
using simd::storev;
using simd::v16;
using simd::v4;
using simd::v8;

// The register tile is chosen per instruction set, because a tile that fits
// one register file spills on a smaller one (an 8 x 32 tile is 16 zmm
// registers on AVX-512 but 32 ymm on AVX2, which has 16: the AVX2 build of
// the old single tile made attention 17x slower: 72.6 s -> 4.3 s over four
// baby-GPT steps on an AVX2-only EPYC once the tile fit).
//   AVX-512 (32 x 16 floats): 8 x 32 tile, 16 accumulators
//   AVX2+FMA (16 x 8 floats): 6 x 16 tile, 12 accumulators + 2 B + 1 broadcast
//   baseline SSE2 (16 x 4):   6 x 8 tile, same register budget

// A's element (row i, depth k) is A[i * sa + k * sk]: (lda, 1) plain, (1, lda) transposed.
// MR x (NV * W) tile: MR * NV accumulators in vector registers, B rows streamed once.
template <class V, int MR, int NV>
__attribute__((always_inline)) inline void tile(int64_t K, float alpha, const float* A, int64_t sa, int64_t sk,
                                                const float* B, int64_t ldb, float* C, int64_t ldc, bool acc) {
  constexpr int W = sizeof(V) / sizeof(float);
  V c[MR][NV] = {};
  for (int64_t k = 0; k < K; ++k) {
    V b[NV];
#pragma GCC unroll 4
    for (int h = 0; h < NV; ++h) b[h] = loadv<V>(B + k * ldb + h * W);
    const float* ak = A + k * sk;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float a = ak[r * sa];
#pragma GCC unroll 4
      for (int h = 0; h < NV; ++h) c[r][h] += a * b[h];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int h = 0; h < NV; ++h) {
      float* dst = C + r * ldc + h * W;
      const V v = alpha * c[r][h];
      storev<V>(dst, acc ? loadv<V>(dst) + v : v);
    }
}

// The last rows of a column block (mr < MR), still in registers.
template <class V, int MR, int NV>
__attribute__((always_inline)) inline void tile_rows(int64_t mr, int64_t K, float alpha, const float* A, int64_t sa,
                                                     int64_t sk, const float* B, int64_t ldb, float* C, int64_t ldc,
                                                     bool acc) {
  if constexpr (MR > 1) {
    if (mr == MR - 1) return tile<V, MR - 1, NV>(K, alpha, A, sa, sk, B, ldb, C, ldc, acc);
    return tile_rows<V, MR - 1, NV>(mr, K, alpha, A, sa, sk, B, ldb, C, ldc, acc);
  }
}

// Fewer columns than one vector of W floats: plain loops.
template <int MR, int W>
__attribute__((always_inline)) inline void tile_edge(int64_t mr, int64_t nr, int64_t K, float alpha, const float* A,
                                                     int64_t sa, int64_t sk, const float* B, int64_t ldb, float* C,
                                                     int64_t ldc, bool acc) {
  float c[MR][W] = {};
  for (int64_t k = 0; k < K; ++k)
    for (int64_t r = 0; r < mr; ++r) {
      const float a = A[r * sa + k * sk];
      for (int64_t j = 0; j < nr; ++j) c[r][j] += a * B[k * ldb + j];
    }
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) C[r * ldc + j] = (acc ? C[r * ldc + j] : 0.0f) + alpha * c[r][j];
}

// One block of NV vectors' worth of columns, over all rows: full MR-row
// tiles, then the remainder rows.
template <class V, int MR, int NV>
__attribute__((always_inline)) inline void column_block(int64_t M, int64_t K, float alpha, const float* A, int64_t sa,
                                                        int64_t sk, const float* B, int64_t ldb, float* C, int64_t ldc,
                                                        bool acc) {
  for (int64_t i0 = 0; i0 < M; i0 += MR) {
    if (M - i0 >= MR)
      tile<V, MR, NV>(K, alpha, A + i0 * sa, sa, sk, B, ldb, C + i0 * ldc, ldc, acc);
    else
      tile_rows<V, MR, NV>(M - i0, K, alpha, A + i0 * sa, sa, sk, B, ldb, C + i0 * ldc, ldc, acc);
  }
}

// Columns in blocks of NV vectors, then single vectors, then the scalar edge.
// Each element of C sums over k in order, whatever the tile, so the result
// does not depend on how the shape is split.
template <class V, int MR, int NV>
__attribute__((always_inline)) inline void gemm_tiles(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                                      int64_t sa, int64_t sk, const float* B, int64_t ldb, float* C,
                                                      int64_t ldc, bool acc) {
  constexpr int64_t W = sizeof(V) / sizeof(float);
  int64_t j0 = 0;
  for (; j0 + NV * W <= N; j0 += NV * W) column_block<V, MR, NV>(M, K, alpha, A, sa, sk, B + j0, ldb, C + j0, ldc, acc);
  for (; j0 + W <= N; j0 += W) column_block<V, MR, 1>(M, K, alpha, A, sa, sk, B + j0, ldb, C + j0, ldc, acc);
  if (j0 < N)
    for (int64_t i0 = 0; i0 < M; i0 += MR)
      tile_edge<MR, W>(std::min<int64_t>(MR, M - i0), N - j0, K, alpha, A + i0 * sa, sa, sk, B + j0, ldb,
                       C + i0 * ldc + j0, ldc, acc);
}

using GemmFn = void (*)(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, float*,
                        int64_t, bool);

void gemm_baseline(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t sa, int64_t sk, const float* B,
                   int64_t ldb, float* C, int64_t ldc, bool acc) {
  gemm_tiles<v4, 6, 2>(M, N, K, alpha, A, sa, sk, B, ldb, C, ldc, acc);
}

#if PARALLM_ISA_DISPATCH
__attribute__((target("avx2,fma"))) void gemm_avx2(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                                   int64_t sa, int64_t sk, const float* B, int64_t ldb, float* C,
                                                   int64_t ldc, bool acc) {
  gemm_tiles<v8, 6, 2>(M, N, K, alpha, A, sa, sk, B, ldb, C, ldc, acc);
}
__attribute__((target("avx512f"))) void gemm_avx512(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                                    int64_t sa, int64_t sk, const float* B, int64_t ldb, float* C,
                                                    int64_t ldc, bool acc) {
  gemm_tiles<v16, 8, 2>(M, N, K, alpha, A, sa, sk, B, ldb, C, ldc, acc);
}
#else
constexpr GemmFn gemm_avx512 = nullptr, gemm_avx2 = nullptr;
#endif

void small_gemm_impl(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t sa, int64_t sk,
                     const float* B, int64_t ldb, float* C, int64_t ldc, bool acc) {
  // Chosen once from the CPU's feature bits (PARALLM_ISA caps it for tests).
  static const GemmFn fn = simd::by_isa<GemmFn>(gemm_avx512, gemm_avx2, gemm_baseline);
  fn(M, N, K, alpha, A, sa, sk, B, ldb, C, ldc, acc);
}

// Index vector of V's lane count, for __builtin_shuffle (keyed by the
// width: a vector type's attributes do not survive as a template argument).
template <int Bytes>
struct LaneIndex {
  typedef int32_t type __attribute__((vector_size(Bytes)));
};
template <class V>
using lanes_of = typename LaneIndex<sizeof(V)>::type;

// Exchanges bit `b` of the row and column index inside a W x W tile held as
// W row vectors: rows i and i + b trade their off-diagonal b-wide blocks.
// Applying it for b = W/2, ..., 2, 1 transposes the tile (each pass swaps one
// bit). Shuffle indices: element j of row i (bit b clear) and of row i + b
// (bit b set); 0..W-1 pick from row i, W..2W-1 from row i + b.
template <class V, int b, bool upper, int... j>
constexpr lanes_of<V> swap_mask(std::integer_sequence<int, j...>) {
  constexpr int W = sizeof...(j);
  return lanes_of<V>{(upper ? ((j & b) ? W + j : j + b) : ((j & b) ? W + j - b : j))...};
}

template <class V, int b>
__attribute__((always_inline)) inline void swap_bit(V* R) {
  constexpr int W = sizeof(V) / sizeof(float);
  constexpr auto idx = std::make_integer_sequence<int, W>{};
  constexpr lanes_of<V> lo = swap_mask<V, b, false>(idx), hi = swap_mask<V, b, true>(idx);
#pragma GCC unroll 16
  for (int i = 0; i < W; ++i)
    if (!(i & b)) {
      const V a = R[i], c = R[i + b];
      R[i] = __builtin_shuffle(a, c, lo);
      R[i + b] = __builtin_shuffle(a, c, hi);
    }
}

// Like the GEMM tile, the transpose tile is sized per instruction set: W x W
// with W the vector width, all W rows in registers (a 16 x 16 tile of v16 is
// 32 ymm registers on AVX2 and spilled: 2.8 us for attention's 64 x 32 K^T).
template <class V>
__attribute__((always_inline)) inline void transpose_tiles(float* dst, int64_t ld_dst, const float* src, int64_t ld_src,
                                                           int64_t rows, int64_t cols) {
  constexpr int W = sizeof(V) / sizeof(float);
  const int64_t rowsW = rows / W * W, colsW = cols / W * W;
  for (int64_t r0 = 0; r0 < rowsW; r0 += W)
    for (int64_t c0 = 0; c0 < colsW; c0 += W) {
      V R[W];
#pragma GCC unroll 16
      for (int i = 0; i < W; ++i) R[i] = loadv<V>(src + (r0 + i) * ld_src + c0);
      if constexpr (W >= 16) swap_bit<V, 8>(R);
      if constexpr (W >= 8) swap_bit<V, 4>(R);
      swap_bit<V, 2>(R);
      swap_bit<V, 1>(R);
#pragma GCC unroll 16
      for (int i = 0; i < W; ++i) storev<V>(dst + (c0 + i) * ld_dst + r0, R[i]);
    }
  // Ragged right and bottom edges element by element.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < rowsW ? colsW : 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
}

using TransposeFn = void (*)(float*, int64_t, const float*, int64_t, int64_t, int64_t);

void transpose_baseline(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols) {
  transpose_tiles<v4>(dst, ld_dst, src, ld_src, rows, cols);
}

#if PARALLM_ISA_DISPATCH
__attribute__((target("avx2,fma"))) void transpose_avx2(float* dst, int64_t ld_dst, const float* src, int64_t ld_src,
                                                        int64_t rows, int64_t cols) {
  transpose_tiles<v8>(dst, ld_dst, src, ld_src, rows, cols);
}
__attribute__((target("avx512f"))) void transpose_avx512(float* dst, int64_t ld_dst, const float* src, int64_t ld_src,
                                                         int64_t rows, int64_t cols) {
  transpose_tiles<v16>(dst, ld_dst, src, ld_src, rows, cols);
}
#else
constexpr TransposeFn transpose_avx512 = nullptr, transpose_avx2 = nullptr;
#endif

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
  static const TransposeFn fn = simd::by_isa<TransposeFn>(transpose_avx512, transpose_avx2, transpose_baseline);
  fn(dst, ld_dst, src, ld_src, rows, cols);
}

}  // namespace parallm::kernels::cpu
