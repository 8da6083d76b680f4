// LayerNorm on the GPU. Forward: one warp per row (mean, then variance from
// the centred values, as the CPU does), 16-byte loads where rows are aligned.
// Backward: dinp per row, and dweight and dbias by deterministic column sums
// of dout * xhat and dout: per-chunk partial sums, then the chunks added in a
// fixed order (ln_backward_final), so every run gives the same bits. Where
// rows are 16-byte aligned, one fused kernel reads each row once for dinp and
// its chunk's partial sums (ln_backward_fused); otherwise two passes
// (ln_backward_dinp, ln_backward_partial). Kernels are templated on the
// element type (float, or bf16 with fp32 statistics and fp32 weight
// gradients).
#include "core/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/layernorm.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kWarpsPerBlock = 8;
constexpr int kRowsPerChunk = 256;
constexpr int kTy = 8;

// One warp per row; V elements per load (a 16-byte vector where rows are
// aligned, else 1). Mean, then the variance of the centred values, then out.
template <class T, int V>
__global__ void ln_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, int64_t N,
                           int64_t C) {
  int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  auto load = [](const T* p) {
    if constexpr (V == 1) {
      Vec16<T> v;
      v.set(0, to_f(*p));
      return v;
    } else {
      return load16(p);
    }
  };
  float s = 0;
  for (int64_t c = lane * V; c < C; c += 32 * V) {
    const Vec16<T> xv = load(x + c);
    for (int k = 0; k < V; ++k) s += xv.get(k);
  }
  float m = warp_sum(s) / static_cast<float>(C);
  float v = 0;
  for (int64_t c = lane * V; c < C; c += 32 * V) {
    const Vec16<T> xv = load(x + c);
    for (int k = 0; k < V; ++k) {
      float d = xv.get(k) - m;
      v += d * d;
    }
  }
  float r = rsqrtf(warp_sum(v) / static_cast<float>(C) + kLayerNormEps);
  T* o = out + row * C;
  for (int64_t c = lane * V; c < C; c += 32 * V) {
    const Vec16<T> xv = load(x + c), wv = load(w + c);
    Vec16<T> ov;
    if (b) {
      const Vec16<T> bv = load(b + c);
      for (int k = 0; k < V; ++k) ov.set(k, (xv.get(k) - m) * r * wv.get(k) + bv.get(k));
    } else {
      for (int k = 0; k < V; ++k) ov.set(k, (xv.get(k) - m) * r * wv.get(k));
    }
    if constexpr (V == 1)
      o[c] = from_f<T>(ov.get(0));
    else
      store16(o + c, ov);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <class T>
__global__ void ln_backward_dinp(T* dinp, const T* dout, const T* inp, const T* w, const float* mean, const float* rstd,
                                 int64_t N, int64_t C) {
  int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  float m = mean[row], r = rstd[row];
  float sd = 0, sdx = 0;
  for (int64_t c = lane; c < C; c += 32) {
    float dn = to_f(dy[c]) * to_f(w[c]);
    sd += dn;
    sdx += dn * (to_f(x[c]) - m) * r;
  }
  sd = warp_sum(sd) / static_cast<float>(C);
  sdx = warp_sum(sdx) / static_cast<float>(C);
  T* dx = dinp + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    float xh = (to_f(x[c]) - m) * r;
    dx[c] = from_f<T>(to_f(dx[c]) + r * (to_f(dy[c]) * to_f(w[c]) - sd - xh * sdx));
  }
}

// In a block of 32 x kTy threads: thread (x, 0) ends with the sums of a and b
// over its column's kTy threads, added in row order.
__device__ __forceinline__ void sum_over_rows(float& a, float& b, float (&sw)[kTy][33], float (&sb)[kTy][33]) {
  sw[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0) return;
  a = b = 0.0f;
  for (int i = 0; i < kTy; ++i) {
    a += sw[i][threadIdx.x];
    b += sb[i][threadIdx.x];
  }
}

// partial[0][chunk][c] = sum dout * xhat, partial[1][chunk][c] = sum dout over the chunk's rows.
template <class T>
__global__ void ln_backward_partial(float* partial, const T* dout, const T* inp, const float* mean, const float* rstd,
                                    int64_t N, int64_t C, int64_t chunks) {
  __shared__ float sw[kTy][33], sb[kTy][33];
  int64_t c = blockIdx.x * 32 + threadIdx.x;
  int64_t r0 = blockIdx.y * int64_t{kRowsPerChunk};
  int64_t r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  float a = 0, b = 0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTy) {
      float dy = to_f(dout[r * C + c]);
      a += dy * (to_f(inp[r * C + c]) - mean[r]) * rstd[r];
      b += dy;
    }
  sum_over_rows(a, b, sw, sb);
  if (threadIdx.y == 0 && c < C) {
    partial[blockIdx.y * C + c] = a;
    partial[(chunks + blockIdx.y) * C + c] = b;
  }
}

// The fused backward: a block takes kFusedRows rows, a warp one row at a time
// (16-byte loads): dinp as ln_backward_dinp, and dout * xhat and dout summed
// into the warp's own shared-memory row of column sums; the block then adds
// its warps' sums in order into partial[chunk = block]. No atomics.
constexpr int kFusedWarps = 8;
constexpr int kFusedRows = 32;

template <class T>
__global__ void __launch_bounds__(32 * kFusedWarps)
    ln_backward_fused(T* dinp, float* partial, const T* dout, const T* inp, const T* w, const float* mean,
                      const float* rstd, int64_t N, int C, int64_t chunks) {
  extern __shared__ float4 sums4[];  // [warp][dout * xhat | dout][C]
  constexpr int V = Vec16<T>::n;
  float* sums = reinterpret_cast<float*>(sums4);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sw = sums + warp * 2 * C;
  float* sb = sw + C;
  for (int c = lane; c < 2 * C; c += 32) sw[c] = 0.0f;
  __syncwarp();
  const int64_t r0 = blockIdx.x * int64_t{kFusedRows}, r1 = r0 + kFusedRows < N ? r0 + kFusedRows : N;
  for (int64_t row = r0 + warp; row < r1; row += kFusedWarps) {
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    T* dx = dinp + row * C;
    const float m = mean[row], r = rstd[row];
    float sd = 0, sdx = 0;
    for (int c = lane * V; c < C; c += 32 * V) {
      const Vec16<T> xv = load16(x + c), gv = load16(dy + c), wv = load16(w + c);
      for (int k = 0; k < V; ++k) {
        const float dn = gv.get(k) * wv.get(k);
        sd += dn;
        sdx += dn * (xv.get(k) - m) * r;
      }
    }
    sd = warp_sum(sd) / static_cast<float>(C);
    sdx = warp_sum(sdx) / static_cast<float>(C);
    for (int c = lane * V; c < C; c += 32 * V) {
      const Vec16<T> xv = load16(x + c), gv = load16(dy + c), wv = load16(w + c);
      Vec16<T> o = load16(dx + c);
      for (int k = 0; k < V; k += 4) {
        float4 a = *reinterpret_cast<float4*>(sw + c + k), b = *reinterpret_cast<float4*>(sb + c + k);
        float* ap = &a.x;
        float* bp = &b.x;
        for (int j = 0; j < 4; ++j) {
          const float g = gv.get(k + j), xh = (xv.get(k + j) - m) * r;
          o.set(k + j, o.get(k + j) + r * (g * wv.get(k + j) - sd - xh * sdx));
          ap[j] += g * xh;
          bp[j] += g;
        }
        *reinterpret_cast<float4*>(sw + c + k) = a;
        *reinterpret_cast<float4*>(sb + c + k) = b;
      }
      store16(dx + c, o);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float a = 0, b = 0;
    for (int i = 0; i < kFusedWarps; ++i) {
      a += sums[i * 2 * C + c];
      b += sums[i * 2 * C + C + c];
    }
    partial[blockIdx.x * int64_t{C} + c] = a;
    partial[(chunks + blockIdx.x) * C + c] = b;
  }
}

// dw (and db) += the sums of partial's chunks, in a fixed order: a block of
// 32 x kTy threads takes 32 columns; row ty adds chunks ty, ty + kTy, ...; then
// the kTy sums are added in order.
__global__ void ln_backward_final(float* dw, float* db, const float* partial, int64_t chunks, int64_t C) {
  __shared__ float sw[kTy][33], sb[kTy][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float a = 0, b = 0;
  if (c < C)
    for (int64_t k = threadIdx.y; k < chunks; k += kTy) {
      a += partial[k * C + c];
      b += partial[(chunks + k) * C + c];
    }
  sum_over_rows(a, b, sw, sb);
  if (threadIdx.y == 0 && c < C) {
    dw[c] += a;
    if (db) db[c] += b;
  }
}

template <class T>
void ln_fwd(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C) {
  if (N <= 0) return;
  constexpr int V = Vec16<T>::n;
  if (C % V == 0 && aligned16(out, inp, weight, bias))
    ln_forward<T, V>
        <<<blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream()>>>(out, mean, rstd, inp, weight, bias, N, C);
  else
    ln_forward<T, 1>
        <<<blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream()>>>(out, mean, rstd, inp, weight, bias, N, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.layernorm_forward");
}

template <class T>
void ln_bwd(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight, const float* mean,
            const float* rstd, int64_t N, int64_t C) {
  if (N <= 0) return;
  const size_t smem = static_cast<size_t>(kFusedWarps) * 2 * C * sizeof(float);
  const bool fused = C % Vec16<T>::n == 0 && smem <= 160 * 1024 && aligned16(dinp, dout, inp, weight);
  const int64_t chunks = fused ? (N + kFusedRows - 1) / kFusedRows : (N + kRowsPerChunk - 1) / kRowsPerChunk;
  gpu::DeviceBuffer partial(static_cast<size_t>(2 * chunks * C) * sizeof(float), MemCategory::Scratch);
  if (fused) {
    static size_t allowed = 48 * 1024;  // dynamic shared memory granted to ln_backward_fused<T> so far
    if (smem > allowed) {
      PARALLM_CUDA_CHECK(cudaFuncSetAttribute(ln_backward_fused<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)),
                         "kernels.cuda.layernorm_backward");
      allowed = smem;
    }
    ln_backward_fused<T><<<static_cast<unsigned>(chunks), 32 * kFusedWarps, smem, stream()>>>(
        dinp, partial.as<float>(), dout, inp, weight, mean, rstd, N, static_cast<int>(C), chunks);
  } else {
    ln_backward_dinp<<<blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream()>>>(dinp, dout, inp, weight, mean,
                                                                                          rstd, N, C);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.layernorm_backward");
    dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(chunks));
    ln_backward_partial<<<grid, dim3(32, kTy), 0, stream()>>>(partial.as<float>(), dout, inp, mean, rstd, N, C, chunks);
  }
  PARALLM_CUDA_LAUNCHED("kernels.cuda.layernorm_backward");
  ln_backward_final<<<static_cast<unsigned>((C + 31) / 32), dim3(32, kTy), 0, stream()>>>(
      dweight, dbias, partial.as<float>(), chunks, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.layernorm_backward");
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C) {
  ln_fwd(out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_forward(bfloat16* out, float* mean, float* rstd, const bfloat16* inp, const bfloat16* weight,
                       const bfloat16* bias, int64_t N, int64_t C) {
  ln_fwd(out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  ln_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_backward(bfloat16* dinp, float* dweight, float* dbias, const bfloat16* dout, const bfloat16* inp,
                        const bfloat16* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  ln_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

}  // namespace parallm::kernels::cuda
