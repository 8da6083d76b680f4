// RoPE + grouped-query packing on the GPU (rope.h): one thread per pair
// (i, i + D/2) of a head of a row. Backward gives each KV head's thread the
// sum over its query heads in head order, as the CPU does.
#include "kernels/cuda/common.cuh"
#include "kernels/rope.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// (a, b) rotated by row cs's pair i; sign -1: the transpose.
__device__ __forceinline__ void rot_pair(float& y0, float& y1, float a, float b, const float* cs, int64_t i, int64_t h,
                                         float sign) {
  if (!cs) {
    y0 = a;
    y1 = b;
    return;
  }
  const float c = cs[i], s = sign * cs[h + i];
  y0 = a * c - b * s;
  y1 = b * c + a * s;
}

template <class E>
__global__ void pack_fwd(E* qkv, const E* q, const E* k, const E* v, const float* rope, int64_t N, int64_t T, int64_t H,
                         int64_t KV, int64_t D) {
  const int64_t h2 = D / 2, per_row = H * h2, total = N * per_row, g = H / KV, C = H * D, Ck = KV * D;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = t / per_row, h = t % per_row / h2, i = t % h2, j = h / g;
    const float* cs = rope ? rope + (n % T) * D : nullptr;
    E* row = qkv + n * 3 * C;
    float y0, y1;
    rot_pair(y0, y1, to_f(q[n * C + h * D + i]), to_f(q[n * C + h * D + h2 + i]), cs, i, h2, 1.0f);
    row[h * D + i] = from_f<E>(y0);
    row[h * D + h2 + i] = from_f<E>(y1);
    rot_pair(y0, y1, to_f(k[n * Ck + j * D + i]), to_f(k[n * Ck + j * D + h2 + i]), cs, i, h2, 1.0f);
    row[C + h * D + i] = from_f<E>(y0);
    row[C + h * D + h2 + i] = from_f<E>(y1);
    row[2 * C + h * D + i] = v[n * Ck + j * D + i];
    row[2 * C + h * D + h2 + i] = v[n * Ck + j * D + h2 + i];
  }
}

template <class E>
__global__ void pack_bwd_q(E* dq, const E* dqkv, const float* rope, int64_t N, int64_t T, int64_t H, int64_t D) {
  const int64_t h2 = D / 2, per_row = H * h2, total = N * per_row, C = H * D;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = t / per_row, h = t % per_row / h2, i = t % h2;
    const float* cs = rope ? rope + (n % T) * D : nullptr;
    const E* row = dqkv + n * 3 * C;
    float y0, y1;
    rot_pair(y0, y1, to_f(row[h * D + i]), to_f(row[h * D + h2 + i]), cs, i, h2, -1.0f);
    dq[n * C + h * D + i] = from_f<E>(y0);
    dq[n * C + h * D + h2 + i] = from_f<E>(y1);
  }
}

template <class E>
__global__ void pack_bwd_kv(E* dk, E* dv, const E* dqkv, const float* rope, int64_t N, int64_t T, int64_t H, int64_t KV,
                            int64_t D) {
  const int64_t h2 = D / 2, per_row = KV * h2, total = N * per_row, g = H / KV, C = H * D, Ck = KV * D;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = t / per_row, j = t % per_row / h2, i = t % h2;
    const float* cs = rope ? rope + (n % T) * D : nullptr;
    const E* row = dqkv + n * 3 * C;
    float k0 = 0, k1 = 0, v0 = 0, v1 = 0;
    for (int64_t h = j * g; h < (j + 1) * g; ++h) {
      float y0, y1;
      rot_pair(y0, y1, to_f(row[C + h * D + i]), to_f(row[C + h * D + h2 + i]), cs, i, h2, -1.0f);
      k0 += y0;
      k1 += y1;
      v0 += to_f(row[2 * C + h * D + i]);
      v1 += to_f(row[2 * C + h * D + h2 + i]);
    }
    dk[n * Ck + j * D + i] = from_f<E>(k0);
    dk[n * Ck + j * D + h2 + i] = from_f<E>(k1);
    dv[n * Ck + j * D + i] = from_f<E>(v0);
    dv[n * Ck + j * D + h2 + i] = from_f<E>(v1);
  }
}

template <class E>
void fwd(E* qkv, const E* q, const E* k, const E* v, const float* rope, int64_t B, int64_t T, int64_t H, int64_t KV,
         int64_t D) {
  const int64_t n = B * T * H * (D / 2);
  if (n <= 0) return;
  pack_fwd<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(qkv, q, k, v, rope, B * T, T, H, KV, D);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.rope_pack_forward");
}

template <class E>
void bwd(E* dq, E* dk, E* dv, const E* dqkv, const float* rope, int64_t B, int64_t T, int64_t H, int64_t KV,
         int64_t D) {
  const int64_t nq = B * T * H * (D / 2), nk = B * T * KV * (D / 2);
  if (nq <= 0) return;
  pack_bwd_q<<<capped_blocks(nq, kThreads), kThreads, 0, stream()>>>(dq, dqkv, rope, B * T, T, H, D);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.rope_pack_backward");
  pack_bwd_kv<<<capped_blocks(nk, kThreads), kThreads, 0, stream()>>>(dk, dv, dqkv, rope, B * T, T, H, KV, D);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.rope_pack_backward");
}
}  // namespace

void rope_pack_forward(float* qkv, const float* q, const float* k, const float* v, const float* rope, int64_t B,
                       int64_t T, int64_t H, int64_t KV, int64_t D) {
  fwd(qkv, q, k, v, rope, B, T, H, KV, D);
}
void rope_pack_forward(bfloat16* qkv, const bfloat16* q, const bfloat16* k, const bfloat16* v, const float* rope,
                       int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D) {
  fwd(qkv, q, k, v, rope, B, T, H, KV, D);
}
void rope_pack_backward(float* dq, float* dk, float* dv, const float* dqkv, const float* rope, int64_t B, int64_t T,
                        int64_t H, int64_t KV, int64_t D) {
  bwd(dq, dk, dv, dqkv, rope, B, T, H, KV, D);
}
void rope_pack_backward(bfloat16* dq, bfloat16* dk, bfloat16* dv, const bfloat16* dqkv, const float* rope, int64_t B,
                        int64_t T, int64_t H, int64_t KV, int64_t D) {
  bwd(dq, dk, dv, dqkv, rope, B, T, H, KV, D);
}

}  // namespace parallm::kernels::cuda
