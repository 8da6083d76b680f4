// Flash-style causal attention for bf16 with head size 64 (FlashAttention-2's
// scheme on mma.sync tensor-core instructions; no T x T matrix in memory).
// A block of 4 warps takes 64 rows of one (sequence, head); each warp owns 16
// rows and keeps its 16 x 64 accumulators in registers. Tiles of 64 rows x 64
// columns are staged in shared memory by cp.async, double-buffered, with a
// padded row stride so ldmatrix reads no bank twice.
//   forward:  for each key block up to the diagonal: S = Q K^T, online
//             softmax in the log2 domain (fp32), O += bf16(P) V; O /= rowsum,
//             lse = ln(sum exp(scale * S)) per row.
//   backward: D = rowsum(dO * O) first; then two kernels, so that every
//             output element is written once by one block (no atomics, so
//             the gradients are bitwise reproducible):
//             dK, dV: per key block, loop over the query blocks at or below
//                     the diagonal: P^T and dP^T = V dO^T recomputed,
//                     dV += bf16(P^T) dO, dK += bf16(P^T * (dP^T - D)) Q;
//             dQ:     per query block, loop over the key blocks:
//                     dQ += bf16(P * (dP - D)) K.
// Rows past T are loaded as zeros and carry lse = +inf (so P = 0); the
// causal mask covers keys past T. Heavy blocks (long loops) start first.
// Attention dropout (FlashAttention-2's placement): the softmax sums the
// undropped P, the products take P' = P * mask / (1 - p), and the backward
// uses dS = P * (dP * mask / (1 - p) - D), D = rowsum(dO * O) of the dropped
// output. Each 64 x 64 tile's keep bits are drawn into shared memory by the
// block (two threads per query row, one Philox call per four mask indices,
// core/philox.h), the same index (sample-head, query, key) and generator as
// the GEMM path's row kernels and the CPU's, so the masks are theirs bit for
// bit; the backward kernels draw their tiles again rather than storing them.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"

namespace parallm::kernels::cuda {

namespace {

using u16 = uint16_t;
constexpr int kD = 64;               // head size
constexpr int kBlock = 64;           // rows of a query or key block
constexpr int kLd = kD + 8;          // shared-memory row stride in elements
constexpr int kTile = kBlock * kLd;  // elements of one staged tile
constexpr int kThreads = 128;        // 4 warps x 16 rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Rows [row0, row0 + 64) of one head's 64 columns (row stride ld) into a tile;
// rows at or past T become zeros.
__device__ __forceinline__ void load_tile_async(u16* tile, const u16* src, int64_t row0, int64_t T, int64_t ld) {
  for (int c = threadIdx.x; c < kBlock * 8; c += kThreads) {
    const int r = c >> 3, col = (c & 7) * 8;
    const int64_t row = row0 + r;
    const u16* g = src + (row < T ? row : 0) * ld + col;
    const int bytes = row < T ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(tile + r * kLd + col)), "l"(g),
                 "r"(bytes));
  }
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const u16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const u16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// d (16 x 8, fp32) += a (16 x 16, bf16) * b (16 x 8, bf16).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float bf(u16 x) {
  return __uint_as_float(static_cast<uint32_t>(x) << 16);
}

// Fragments: a warp's 16 x 64 operand is 4 k-steps of 16 columns. In an
// accumulator acc[nt][e], element e sits at row (lane/4) + 8*(e/2) and
// column 8*nt + 2*(lane%4) + e%2.
using AFrag = uint32_t[4][4];
using Acc = float[8][4];

// The A operand: rows [r0, r0 + 16) of a row-major tile.
__device__ __forceinline__ void load_a(AFrag& a, const u16* tile, int r0) {
  const int l = threadIdx.x & 31;
  for (int kk = 0; kk < 4; ++kk)
    ldsm_x4(a[kk], tile + (r0 + (l & 7) + ((l >> 3) & 1) * 8) * kLd + kk * 16 + (l >> 4) * 8);
}
// acc += A * tile^T (the tile holds B^T: row n, column k).
__device__ __forceinline__ void mma_abt(Acc& acc, const AFrag& a, const u16* tile) {
  const int l = threadIdx.x & 31;
  for (int kk = 0; kk < 4; ++kk)
    for (int nt = 0; nt < 8; nt += 2) {
      uint32_t b[4];
      ldsm_x4(b, tile + ((nt + (l >> 4)) * 8 + (l & 7)) * kLd + kk * 16 + ((l >> 3) & 1) * 8);
      mma(acc[nt], a[kk], b[0], b[1]);
      mma(acc[nt + 1], a[kk], b[2], b[3]);
    }
}
// acc += A * tile (the tile holds B: row k, column n).
__device__ __forceinline__ void mma_ab(Acc& acc, const AFrag& a, const u16* tile) {
  const int l = threadIdx.x & 31;
  for (int kk = 0; kk < 4; ++kk)
    for (int nt = 0; nt < 8; nt += 2) {
      uint32_t b[4];
      ldsm_x4_trans(b, tile + (kk * 16 + ((l >> 3) & 1) * 8 + (l & 7)) * kLd + (nt + (l >> 4)) * 8);
      mma(acc[nt], a[kk], b[0], b[1]);
      mma(acc[nt + 1], a[kk], b[2], b[3]);
    }
}
// An accumulator, rounded to bf16, as the A operand of the next product.
__device__ __forceinline__ void acc_to_a(AFrag& a, const Acc& s) {
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}
// A warp's 16 rows (from row0) of an accumulator times mul[row half], as bf16
// into dst (row stride ld); rows at or past T are skipped.
__device__ __forceinline__ void store_rows(u16* dst, int64_t ld, int64_t row0, int64_t T, const Acc& acc,
                                           const float (&mul)[2]) {
  const int l = threadIdx.x & 31, c = (l & 3) * 2;
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + (l >> 2) + half * 8;
    if (row >= T) continue;
    for (int nt = 0; nt < 8; ++nt)
      *reinterpret_cast<uint32_t*>(dst + row * ld + nt * 8 + c) =
          pack_bf16(acc[nt][2 * half] * mul[half], acc[nt][2 * half + 1] * mul[half]);
  }
}
// The dropout of one call: AttnDropout with its (sample, head) stride resolved.
struct FlashDrop {
  float p = 0.0f, inv_keep = 1.0f;
  uint64_t seed = 0, stream = 0;
  int64_t bh_base = 0, bh_stride = 0;
};
constexpr int kMaskWords = 2 * kBlock;  // a tile's keep bits: two 32-bit words per row

// Keep bits of query rows [q0, q0 + 64) x keys [k0, k0 + 64) of (sample,
// head) gbh into mask: bit c of word 2r + h is key k0 + 32h + c of query
// q0 + r. Mask index (gbh * T + query) * T + key, lane index % 4 of Philox
// block index / 4, kept when its unit value is >= p (dropout_keep_at).
__device__ __forceinline__ void dropout_tile(uint32_t* mask, const FlashDrop& d, int64_t gbh, int64_t T, int64_t q0,
                                             int64_t k0) {
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const uint64_t g0 = static_cast<uint64_t>((gbh * T + q0 + r) * T + k0 + 32 * half);
  uint32_t bits = 0;
  for (uint64_t blk = g0 / 4; blk * 4 < g0 + 32; ++blk) {
    uint32_t x[4];
    philox4x32_into(x, d.seed, d.stream, blk);
    for (int lane = 0; lane < 4; ++lane) {
      const uint64_t g = blk * 4 + lane;
      if (g >= g0 && g < g0 + 32 && u32_to_unit(x[lane]) >= d.p) bits |= 1u << (g - g0);
    }
  }
  mask[threadIdx.x] = bits;
}
// mask / (1 - p) of tile query row r, tile key column c.
__device__ __forceinline__ float tile_keep(const uint32_t* mask, int r, int c, float inv_keep) {
  return (mask[2 * r + (c >> 5)] >> (c & 31)) & 1u ? inv_keep : 0.0f;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Grid (B*NH, query blocks), heaviest (last) query block first.
template <bool kDrop>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(u16* out, float* lse, const u16* qkv, int T, int C, int NH, float sl2, FlashDrop drop) {
  __shared__ __align__(16) u16 sQ[kTile];
  __shared__ __align__(16) u16 sKV[2][2][kTile];  // [buffer][K, V]
  __shared__ uint32_t sM[kDrop ? kMaskWords : 1];
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH, qb = gridDim.y - 1 - blockIdx.y;
  const int64_t gbh = drop.bh_base + static_cast<int64_t>(b) * drop.bh_stride + h;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, tig = l & 3;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const u16* q = qkv + static_cast<int64_t>(b) * T * C3 + h * kD;
  load_tile_async(sQ, q, static_cast<int64_t>(qb) * kBlock, T, C3);
  load_tile_async(sKV[0][0], q + C, 0, T, C3);
  load_tile_async(sKV[0][1], q + 2 * C, 0, T, C3);
  cp_async_commit();
  AFrag qa;
  Acc o = {};
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.0f, 0.0f};
  for (int kb = 0; kb <= qb; ++kb) {
    if (kb < qb) {
      load_tile_async(sKV[(kb + 1) & 1][0], q + C, static_cast<int64_t>(kb + 1) * kBlock, T, C3);
      load_tile_async(sKV[(kb + 1) & 1][1], q + 2 * C, static_cast<int64_t>(kb + 1) * kBlock, T, C3);
      cp_async_commit();
    }
    if constexpr (kDrop)
      dropout_tile(sM, drop, gbh, T, static_cast<int64_t>(qb) * kBlock, static_cast<int64_t>(kb) * kBlock);
    if (kb < qb)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
    if (kb == 0) load_a(qa, sQ, w * 16);
    Acc s = {};
    mma_abt(s, qa, sKV[kb & 1][0]);
    float mx[2] = {-INFINITY, -INFINITY};
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e] * sl2;
        if (kb == qb && nt * 8 + tig * 2 + (e & 1) > w * 16 + g + (e >> 1) * 8) v = -INFINITY;
        s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    float alpha[2];
    for (int i = 0; i < 2; ++i) {
      const float mn = fmaxf(m[i], quad_max(mx[i]));  // finite: key 0 of a block is never masked
      alpha[i] = exp2f(m[i] - mn);
      m[i] = mn;
      lsum[i] *= alpha[i];
    }
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[nt][e] - m[e >> 1]);
        lsum[e >> 1] += p;  // the softmax sums the undropped P
        if constexpr (kDrop)
          s[nt][e] = p * tile_keep(sM, w * 16 + g + (e >> 1) * 8, nt * 8 + tig * 2 + (e & 1), drop.inv_keep);
        else
          s[nt][e] = p;
        o[nt][e] *= alpha[e >> 1];
      }
    AFrag pa;
    acc_to_a(pa, s);
    mma_ab(o, pa, sKV[kb & 1][1]);
    __syncthreads();
  }
  float inv[2];
  for (int i = 0; i < 2; ++i) {
    lsum[i] = quad_sum(lsum[i]);
    inv[i] = 1.0f / lsum[i];
  }
  const int64_t row0 = static_cast<int64_t>(qb) * kBlock + w * 16;
  store_rows(out + static_cast<int64_t>(b) * T * C + h * kD, C, row0, T, o, inv);
  if (tig == 0)
    for (int i = 0; i < 2; ++i) {
      const int64_t row = row0 + g + i * 8;
      if (row < T) lse[static_cast<int64_t>(bh) * T + row] = (m[i] + log2f(lsum[i])) * kLn2;
    }
}

// D[b, h, t] = sum over the head's columns of dO * O; eight threads per row,
// each with 16 bytes of dO and of O (rows are 16-byte aligned: the pointers
// are, and C is a multiple of 64).
__global__ void rowdot_kernel(float* D, const u16* dout, const u16* out, int64_t rows, int T, int C, int NH) {
  const int64_t idx = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 8;  // (b, t, h)
  const bool live = idx < rows;  // every lane stays for the shuffles
  const int64_t h = idx % NH, bt = idx / NH, b = bt / T, t = bt % T;
  const int part = threadIdx.x & 7;
  const int64_t off = bt * C + h * kD + part * 8;
  float d = 0.0f;
  if (live) {
    const uint4 x = *reinterpret_cast<const uint4*>(dout + off), y = *reinterpret_cast<const uint4*>(out + off);
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
    for (int k = 0; k < 4; ++k)
      d += bf(static_cast<u16>(xs[k] & 0xffffu)) * bf(static_cast<u16>(ys[k] & 0xffffu)) +
           bf(static_cast<u16>(xs[k] >> 16)) * bf(static_cast<u16>(ys[k] >> 16));
  }
  for (int o = 4; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
  if (live && part == 0) D[(b * NH + h) * T + t] = d;
}

constexpr int kKvSmem = 6 * kTile * 2 + 4 * kBlock * 4;  // K, V, 2 x (Q, dO), 2 x (lse, D)
constexpr int kQSmem = 6 * kTile * 2;                    // Q, dO, 2 x (K, V)
constexpr int kMaskSmem = kMaskWords * 4;                // with dropout: a tile's keep bits after the above

// dK and dV of one key block. Grid (B*NH, key blocks); key block 0 (the
// longest loop) first.
template <bool kDrop>
__global__ void __launch_bounds__(kThreads, 3)
    backward_kv_kernel(u16* dqkv, const u16* dout, const u16* qkv, const float* lse, const float* D, int T, int C,
                       int NH, float sl2, float scale, FlashDrop drop) {
  extern __shared__ __align__(16) unsigned char smem[];
  u16* sK = reinterpret_cast<u16*>(smem);
  u16* sV = sK + kTile;
  u16* sQ = sV + kTile;                                  // [buffer][Q, dO]
  float* sL = reinterpret_cast<float*>(sQ + 4 * kTile);  // [buffer][64], lse in log2 units
  float* sD = sL + 2 * kBlock;                           // [buffer][64]
  uint32_t* sM = reinterpret_cast<uint32_t*>(sD + 2 * kBlock);
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH, kb = blockIdx.y, nb = gridDim.y;
  const int64_t gbh = drop.bh_base + static_cast<int64_t>(b) * drop.bh_stride + h;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, tig = l & 3;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const u16* q = qkv + static_cast<int64_t>(b) * T * C3 + h * kD;
  const u16* dO = dout + static_cast<int64_t>(b) * T * C + h * kD;
  const float* Lr = lse + static_cast<int64_t>(bh) * T;
  const float* Dr = D + static_cast<int64_t>(bh) * T;
  auto load_q = [&](int qb, int buf) {
    load_tile_async(sQ + buf * 2 * kTile, q, static_cast<int64_t>(qb) * kBlock, T, C3);
    load_tile_async(sQ + buf * 2 * kTile + kTile, dO, static_cast<int64_t>(qb) * kBlock, T, C);
    if (threadIdx.x < kBlock) {
      const int64_t r = static_cast<int64_t>(qb) * kBlock + threadIdx.x;
      sL[buf * kBlock + threadIdx.x] = r < T ? Lr[r] * kLog2e : INFINITY;
      sD[buf * kBlock + threadIdx.x] = r < T ? Dr[r] : 0.0f;
    }
  };
  load_tile_async(sK, q + C, static_cast<int64_t>(kb) * kBlock, T, C3);
  load_tile_async(sV, q + 2 * C, static_cast<int64_t>(kb) * kBlock, T, C3);
  load_q(kb, 0);
  cp_async_commit();
  Acc dk = {}, dv = {};
  for (int qb = kb; qb < nb; ++qb) {
    const int buf = (qb - kb) & 1;
    if (qb + 1 < nb) {
      load_q(qb + 1, buf ^ 1);
      cp_async_commit();
    }
    if constexpr (kDrop)
      dropout_tile(sM, drop, gbh, T, static_cast<int64_t>(qb) * kBlock, static_cast<int64_t>(kb) * kBlock);
    if (qb + 1 < nb)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
    const u16* tQ = sQ + buf * 2 * kTile;
    const u16* tdO = tQ + kTile;
    const float* tl = sL + buf * kBlock;
    const float* td = sD + buf * kBlock;
    Acc p = {}, dp = {};
    AFrag a;  // K, V, then P^T and dS^T: K and V reloaded from shared memory, not held (3 blocks per SM)
    load_a(a, sK, w * 16);
    mma_abt(p, a, tQ);  // S^T: rows are keys, columns queries
    load_a(a, sV, w * 16);
    mma_abt(dp, a, tdO);  // dP^T
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + tig * 2 + (e & 1), row = w * 16 + g + (e >> 1) * 8;
        float v = exp2f(p[nt][e] * sl2 - tl[col]);
        if (qb == kb && col < row) v = 0.0f;
        if constexpr (kDrop) {
          const float keep = tile_keep(sM, col, row, drop.inv_keep);  // the tile's rows are queries
          p[nt][e] = v * keep;
          dp[nt][e] = v * (dp[nt][e] * keep - td[col]);
        } else {
          p[nt][e] = v;
          dp[nt][e] = v * (dp[nt][e] - td[col]);
        }
      }
    acc_to_a(a, p);
    mma_ab(dv, a, tdO);
    acc_to_a(a, dp);
    mma_ab(dk, a, tQ);
    __syncthreads();
  }
  const int64_t row0 = static_cast<int64_t>(kb) * kBlock + w * 16;
  u16* dst = dqkv + static_cast<int64_t>(b) * T * C3 + h * kD;
  store_rows(dst + C, C3, row0, T, dk, {scale, scale});
  store_rows(dst + 2 * C, C3, row0, T, dv, {1.0f, 1.0f});
}

// dQ of one query block. Grid (B*NH, query blocks), heaviest first.
template <bool kDrop>
__global__ void __launch_bounds__(kThreads)
    backward_q_kernel(u16* dqkv, const u16* dout, const u16* qkv, const float* lse, const float* D, int T, int C,
                      int NH, float sl2, float scale, FlashDrop drop) {
  extern __shared__ __align__(16) unsigned char smem[];
  u16* sQ = reinterpret_cast<u16*>(smem);
  u16* sdO = sQ + kTile;
  u16* sKV = sdO + kTile;  // [buffer][K, V]
  uint32_t* sM = reinterpret_cast<uint32_t*>(sKV + 4 * kTile);
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH, qb = gridDim.y - 1 - blockIdx.y;
  const int64_t gbh = drop.bh_base + static_cast<int64_t>(b) * drop.bh_stride + h;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, tig = l & 3;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const u16* q = qkv + static_cast<int64_t>(b) * T * C3 + h * kD;
  const int64_t row0 = static_cast<int64_t>(qb) * kBlock + w * 16;
  load_tile_async(sQ, q, static_cast<int64_t>(qb) * kBlock, T, C3);
  load_tile_async(sdO, dout + static_cast<int64_t>(b) * T * C + h * kD, static_cast<int64_t>(qb) * kBlock, T, C);
  load_tile_async(sKV, q + C, 0, T, C3);
  load_tile_async(sKV + kTile, q + 2 * C, 0, T, C3);
  cp_async_commit();
  float lr[2], dr[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t row = row0 + g + i * 8;
    lr[i] = row < T ? lse[static_cast<int64_t>(bh) * T + row] * kLog2e : INFINITY;
    dr[i] = row < T ? D[static_cast<int64_t>(bh) * T + row] : 0.0f;
  }
  AFrag qa, doa;
  Acc dq = {};
  for (int kb = 0; kb <= qb; ++kb) {
    u16* cur = sKV + (kb & 1) * 2 * kTile;
    if (kb < qb) {
      u16* nxt = sKV + ((kb + 1) & 1) * 2 * kTile;
      load_tile_async(nxt, q + C, static_cast<int64_t>(kb + 1) * kBlock, T, C3);
      load_tile_async(nxt + kTile, q + 2 * C, static_cast<int64_t>(kb + 1) * kBlock, T, C3);
      cp_async_commit();
    }
    if constexpr (kDrop)
      dropout_tile(sM, drop, gbh, T, static_cast<int64_t>(qb) * kBlock, static_cast<int64_t>(kb) * kBlock);
    if (kb < qb)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
    if (kb == 0) {
      load_a(qa, sQ, w * 16);
      load_a(doa, sdO, w * 16);
    }
    Acc s = {}, dp = {};
    mma_abt(s, qa, cur);            // S
    mma_abt(dp, doa, cur + kTile);  // dP = dO V^T
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + tig * 2 + (e & 1), row = w * 16 + g + (e >> 1) * 8;
        float v = exp2f(s[nt][e] * sl2 - lr[e >> 1]);
        if (kb == qb && col > row) v = 0.0f;
        if constexpr (kDrop)
          s[nt][e] = v * (dp[nt][e] * tile_keep(sM, row, col, drop.inv_keep) - dr[e >> 1]);
        else
          s[nt][e] = v * (dp[nt][e] - dr[e >> 1]);
      }
    AFrag a;
    acc_to_a(a, s);
    mma_ab(dq, a, cur);
    __syncthreads();
  }
  store_rows(dqkv + static_cast<int64_t>(b) * T * C3 + h * kD, C3, row0, T, dq, {scale, scale});
}

dim3 grid_for(int64_t B, int64_t T, int64_t NH) {
  return dim3(static_cast<unsigned>(B * NH), static_cast<unsigned>((T + kBlock - 1) / kBlock));
}

FlashDrop flash_drop(const AttnDropout& d, int64_t NH) {
  if (d.p <= 0.0f) return {};
  return {d.p, 1.0f / (1.0f - d.p), d.seed, d.stream, d.bh_base, d.bh_stride ? d.bh_stride : NH};
}

// Both backward kernels need more than the default 48 KiB of shared memory: granted once per process and variant.
template <bool kDrop>
void grant_backward_smem() {
  static const bool granted = [] {
    PARALLM_CUDA_CHECK(cudaFuncSetAttribute(backward_kv_kernel<kDrop>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            kKvSmem + (kDrop ? kMaskSmem : 0)),
                       "kernels.cuda.flash_attention_backward");
    PARALLM_CUDA_CHECK(cudaFuncSetAttribute(backward_q_kernel<kDrop>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            kQSmem + (kDrop ? kMaskSmem : 0)),
                       "kernels.cuda.flash_attention_backward");
    return true;
  }();
  (void)granted;
}

template <bool kDrop>
void backward_kernels(u16* dq, const u16* dy, const u16* x, const float* lse, const float* D, int64_t B, int64_t T,
                      int64_t C, int64_t NH, float sl2, float scale, const FlashDrop& drop) {
  grant_backward_smem<kDrop>();
  const int mask = kDrop ? kMaskSmem : 0;
  backward_kv_kernel<kDrop><<<grid_for(B, T, NH), kThreads, kKvSmem + mask, stream()>>>(
      dq, dy, x, lse, D, static_cast<int>(T), static_cast<int>(C), static_cast<int>(NH), sl2, scale, drop);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.flash_attention_backward");
  backward_q_kernel<kDrop><<<grid_for(B, T, NH), kThreads, kQSmem + mask, stream()>>>(
      dq, dy, x, lse, D, static_cast<int>(T), static_cast<int>(C), static_cast<int>(NH), sl2, scale, drop);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.flash_attention_backward");
}
}  // namespace

bool flash_attention_applies(int64_t C, int64_t NH, std::initializer_list<const void*> ptrs) {
  if (NH <= 0 || C != NH * kD) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

int64_t flash_attention_workspace_floats(int64_t B, int64_t T, int64_t NH) {
  return B * NH * T;
}

void flash_attention_forward(bfloat16* out, float* lse, const bfloat16* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH, const AttnDropout& drop) {
  if (B == 0 || T == 0) return;
  const float sl2 = kLog2e / std::sqrt(static_cast<float>(kD));
  const FlashDrop d = flash_drop(drop, NH);
  auto* o = reinterpret_cast<u16*>(out);
  const auto* x = reinterpret_cast<const u16*>(qkv);
  const int Ti = static_cast<int>(T), Ci = static_cast<int>(C), NHi = static_cast<int>(NH);
  if (d.p > 0)
    forward_kernel<true><<<grid_for(B, T, NH), kThreads, 0, stream()>>>(o, lse, x, Ti, Ci, NHi, sl2, d);
  else
    forward_kernel<false><<<grid_for(B, T, NH), kThreads, 0, stream()>>>(o, lse, x, Ti, Ci, NHi, sl2, d);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.flash_attention_forward");
}

void flash_attention_backward(bfloat16* dqkv, const bfloat16* dout, const bfloat16* qkv, const bfloat16* out,
                              const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, const AttnDropout& drop,
                              float* workspace) {
  if (B == 0 || T == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD)), sl2 = kLog2e * scale;
  auto* dq = reinterpret_cast<u16*>(dqkv);
  const auto* dy = reinterpret_cast<const u16*>(dout);
  const auto* x = reinterpret_cast<const u16*>(qkv);
  const int64_t rows = B * T * NH;
  rowdot_kernel<<<blocks_for(rows * 8, 256), 256, 0, stream()>>>(workspace, dy, reinterpret_cast<const u16*>(out), rows,
                                                                 static_cast<int>(T), static_cast<int>(C),
                                                                 static_cast<int>(NH));
  PARALLM_CUDA_LAUNCHED("kernels.cuda.flash_attention_backward");
  const FlashDrop d = flash_drop(drop, NH);
  if (d.p > 0)
    backward_kernels<true>(dq, dy, x, lse, workspace, B, T, C, NH, sl2, scale, d);
  else
    backward_kernels<false>(dq, dy, x, lse, workspace, B, T, C, NH, sl2, scale, d);
}

}  // namespace parallm::kernels::cuda
