// LayerNorm on the GPU. Forward: one warp per row (mean, then variance from
// the centred values, as the CPU does). Backward: one warp per row for dinp;
// dweight and dbias by deterministic column sums of dout * xhat and dout
// (row chunks, then chunks in order: the same bits on every run).
#include "core/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/layernorm.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kWarpsPerBlock = 8;
constexpr int kRowsPerChunk = 256;
constexpr int kTy = 8;

__global__ void ln_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                           int64_t N, int64_t C) {
  int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + row * C;
  float s = 0;
  for (int64_t c = lane; c < C; c += 32) s += x[c];
  float m = warp_sum(s) / static_cast<float>(C);
  float v = 0;
  for (int64_t c = lane; c < C; c += 32) {
    float d = x[c] - m;
    v += d * d;
  }
  float r = rsqrtf(warp_sum(v) / static_cast<float>(C) + kLayerNormEps);
  float* o = out + row * C;
  for (int64_t c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + (b ? b[c] : 0.0f);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void ln_backward_dinp(float* dinp, const float* dout, const float* inp, const float* w, const float* mean,
                                 const float* rstd, int64_t N, int64_t C) {
  int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  float m = mean[row], r = rstd[row];
  float sd = 0, sdx = 0;
  for (int64_t c = lane; c < C; c += 32) {
    float dn = dy[c] * w[c];
    sd += dn;
    sdx += dn * (x[c] - m) * r;
  }
  sd = warp_sum(sd) / static_cast<float>(C);
  sdx = warp_sum(sdx) / static_cast<float>(C);
  float* dx = dinp + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    float xh = (x[c] - m) * r;
    dx[c] += r * (dy[c] * w[c] - sd - xh * sdx);
  }
}

// partial[0][chunk][c] = sum dout * xhat, partial[1][chunk][c] = sum dout over the chunk's rows.
__global__ void ln_backward_partial(float* partial, const float* dout, const float* inp, const float* mean,
                                    const float* rstd, int64_t N, int64_t C, int64_t chunks) {
  __shared__ float sw[kTy][33], sb[kTy][33];
  int64_t c = blockIdx.x * 32 + threadIdx.x;
  int64_t r0 = blockIdx.y * int64_t{kRowsPerChunk};
  int64_t r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  float a = 0, b = 0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTy) {
      float dy = dout[r * C + c];
      a += dy * (inp[r * C + c] - mean[r]) * rstd[r];
      b += dy;
    }
  sw[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float ta = 0, tb = 0;
    for (int i = 0; i < kTy; ++i) {
      ta += sw[i][threadIdx.x];
      tb += sb[i][threadIdx.x];
    }
    partial[blockIdx.y * C + c] = ta;
    partial[(chunks + blockIdx.y) * C + c] = tb;
  }
}

__global__ void ln_backward_final(float* dw, float* db, const float* partial, int64_t chunks, int64_t C) {
  int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float a = 0, b = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    a += partial[k * C + c];
    b += partial[(chunks + k) * C + c];
  }
  dw[c] += a;
  if (db) db[c] += b;
}
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C) {
  if (N <= 0) return;
  ln_forward<<<blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream()>>>(out, mean, rstd, inp, weight, bias, N,
                                                                                  C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0) return;
  ln_backward_dinp<<<blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream()>>>(dinp, dout, inp, weight, mean,
                                                                                        rstd, N, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.layernorm_backward");
  int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  gpu::DeviceBuffer partial(static_cast<size_t>(2 * chunks * C) * sizeof(float), MemCategory::Scratch);
  dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(chunks));
  ln_backward_partial<<<grid, dim3(32, kTy), 0, stream()>>>(partial.as<float>(), dout, inp, mean, rstd, N, C, chunks);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.layernorm_backward");
  ln_backward_final<<<blocks_for(C, 256), 256, 0, stream()>>>(dweight, dbias, partial.as<float>(), chunks, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.layernorm_backward");
}

}  // namespace parallm::kernels::cuda
