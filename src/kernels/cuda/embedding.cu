// Token + position embedding on the GPU. Backward without atomics: the
// positions are sorted by token (CUB's radix sort, stable), then one block
// per run of equal tokens adds its rows in position order into dwte. dwpe sums
// over the batch in order. Both are the same bits on every run. Tables and
// activations are float or bf16; the gradients are always fp32.
#include <cub/device/device_radix_sort.cuh>

#include "core/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/embedding.h"

namespace parallm::kernels::cuda {

namespace {
template <class T>
__global__ void emb_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t BT, int64_t Tn,
                            int64_t C) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < BT * C; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t bt = i / C, c = i % C;
    const float e = to_f(wte[static_cast<int64_t>(tokens[bt]) * C + c]);
    out[i] = from_f<T>(wpe ? e + to_f(wpe[(bt % Tn) * C + c]) : e);  // no wpe: rotary models
  }
}

// Block (s, y) handles sorted position s if it starts a run of equal tokens,
// for columns [y * blockDim.x, (y + 1) * blockDim.x). The run's end comes
// from a binary search (the tokens are sorted), so the sum over the run has
// known bounds and its loads do not wait on one another. A run can be long
// (a frequent token: on character data a quarter of the batch), so the
// block's kSplit rows of threads take every kSplit-th row of it and their
// partial sums are added in row order: the same order on every call.
constexpr int kSplit = 8;
template <class T>
__global__ void emb_backward_wte(float* dwte, const T* dout, const int32_t* sorted_tok, const int32_t* sorted_pos,
                                 int64_t BT, int64_t C) {
  __shared__ int64_t end_sh;
  __shared__ float part[kSplit][128];
  const int64_t s = blockIdx.x;
  const int32_t tok = sorted_tok[s];
  if (s > 0 && sorted_tok[s - 1] == tok) return;
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    int64_t lo = s + 1, hi = BT;  // first index in [lo, hi) whose token differs
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted_tok[mid] == tok)
        lo = mid + 1;
      else
        hi = mid;
    }
    end_sh = lo;
  }
  __syncthreads();
  const int64_t end = end_sh, c = blockIdx.y * int64_t{blockDim.x} + threadIdx.x;
  float acc = 0;
  if (c < C) {
#pragma unroll 4
    for (int64_t k = s + threadIdx.y; k < end; k += kSplit)
      acc += to_f(dout[static_cast<int64_t>(sorted_pos[k]) * C + c]);
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float sum = part[0][threadIdx.x];
  for (int y = 1; y < kSplit; ++y) sum += part[y][threadIdx.x];
  dwte[static_cast<int64_t>(tok) * C + c] += sum;
}

template <class T>
__global__ void emb_backward_wpe(float* dwpe, const T* dout, int64_t B, int64_t Tn, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < Tn * C; i += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0;
    for (int64_t b = 0; b < B; ++b) acc += to_f(dout[b * Tn * C + i]);
    dwpe[i] += acc;
  }
}

__global__ void iota(int32_t* v, int64_t n) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) v[i] = static_cast<int32_t>(i);
}

template <class E>
void fwd(E* out, const int32_t* tokens, const E* wte, const E* wpe, int64_t B, int64_t T, int64_t C) {
  if (B * T * C <= 0) return;
  emb_forward<<<capped_blocks(B * T * C, 256), 256, 0, stream()>>>(out, tokens, wte, wpe, B * T, T, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.embedding_forward");
}

template <class E>
void bwd(float* dwte, float* dwpe, const E* dout, const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  const int64_t BT = B * T;
  if (BT * C <= 0) return;
  PARALLM_CHECK(BT < (int64_t{1} << 31), ShapeError, "kernels.cuda.embedding_backward", "B*T = {} too large", BT);
  const int n = static_cast<int>(BT);
  // Sort (token, position) pairs by token; the sort is stable, so runs keep position order.
  size_t temp_bytes = 0;
  PARALLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, static_cast<int32_t*>(nullptr),
                                                     static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n,
                                                     0, 32, stream()),
                     "kernels.cuda.embedding_backward");
  temp_bytes = (temp_bytes + 255) / 256 * 256;  // CUB's temporaries first, at the buffer's aligned start
  gpu::DeviceBuffer buf(temp_bytes + 3 * static_cast<size_t>(n) * sizeof(int32_t), MemCategory::Scratch);
  void* temp = buf.data();
  int32_t* pos_in = reinterpret_cast<int32_t*>(static_cast<char*>(buf.data()) + temp_bytes);
  int32_t* sorted_tok = pos_in + n;
  int32_t* sorted_pos = sorted_tok + n;
  iota<<<blocks_for(n, 256), 256, 0, stream()>>>(pos_in, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.embedding_backward");
  PARALLM_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_tok, pos_in, sorted_pos, n, 0, 32, stream()),
      "kernels.cuda.embedding_backward");
  const int threads = C < 128 ? static_cast<int>((C + 31) / 32 * 32) : 128;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((C + threads - 1) / threads));
  emb_backward_wte<<<grid, dim3(threads, kSplit), 0, stream()>>>(dwte, dout, sorted_tok, sorted_pos, BT, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.embedding_backward");
  if (!dwpe) return;
  emb_backward_wpe<<<capped_blocks(T * C, 256), 256, 0, stream()>>>(dwpe, dout, B, T, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.embedding_backward");
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                       int64_t C) {
  fwd(out, tokens, wte, wpe, B, T, C);
}
void embedding_forward(bfloat16* out, const int32_t* tokens, const bfloat16* wte, const bfloat16* wpe, int64_t B,
                       int64_t T, int64_t C) {
  fwd(out, tokens, wte, wpe, B, T, C);
}
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                        int64_t C) {
  bwd(dwte, dwpe, dout, tokens, B, T, C);
}
void embedding_backward(float* dwte, float* dwpe, const bfloat16* dout, const int32_t* tokens, int64_t B, int64_t T,
                        int64_t C) {
  bwd(dwte, dwpe, dout, tokens, B, T, C);
}

}  // namespace parallm::kernels::cuda
