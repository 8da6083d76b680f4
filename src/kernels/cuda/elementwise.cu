// Residual add, in-place add and dropout on the GPU: grid-stride elementwise
// kernels. Dropout draws the same Philox numbers as the CPU (common.cuh), so a
// mask depends only on (seed, stream, base + i), never on the launch shape.
// Each works on float or bf16 elements in fp32 arithmetic; convert casts.
#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// Elements [0, nv * V) as 16-byte vectors, the rest one by one.
template <class T>
__global__ void residual_kernel(T* out, const T* a, const T* b, int64_t n, int64_t nv) {
  constexpr int V = Vec16<T>::n;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, start = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t i = start; i < nv; i += stride) {
    Vec16<T> x = load16(a + i * V), y = load16(b + i * V), z;
    for (int k = 0; k < V; ++k) z.set(k, x.get(k) + y.get(k));
    store16(out + i * V, z);
  }
  for (int64_t i = nv * V + start; i < n; i += stride) out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

template <class T>
__global__ void bias_kernel(T* out, const T* bias, int64_t N, int64_t C) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, start = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t i = start; i < N * C; i += stride) out[i] = from_f<T>(to_f(out[i]) + to_f(bias[i % C]));
}

template <class TO, class TI>
__global__ void convert_kernel(TO* out, const TI* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = from_f<TO>(to_f(in[i]));
}

__global__ void add_kernel(float* acc, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    acc[i] += x[i];
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] *= s;
}

template <class T>
__global__ void dropout_kernel(T* out, const T* inp, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                               uint64_t base) {
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] =
        from_f<T>(dropout_keep(p, seed, rng_stream, base + static_cast<uint64_t>(i)) ? to_f(inp[i]) * scale : 0.0f);
}

template <class T>
void residual(T* out, const T* a, const T* b, int64_t n) {
  if (n <= 0) return;
  const int64_t nv = aligned16(out, a, b) ? n / Vec16<T>::n : 0;
  residual_kernel<<<capped_blocks(nv > 0 ? nv : n, kThreads), kThreads, 0, stream()>>>(out, a, b, n, nv);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.residual_forward");
}

template <class T>
void dropout(T* out, const T* inp, int64_t n, float p, uint64_t seed, uint64_t rng_stream, uint64_t base) {
  if (n <= 0) return;
  dropout_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(out, inp, n, p, seed, rng_stream, base);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.dropout_forward");
}

template <class TO, class TI>
void convert_to(TO* out, const TI* in, int64_t n) {
  if (n <= 0) return;
  convert_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(out, in, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.convert");
}
}  // namespace

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  residual(out, a, b, n);
}
void residual_forward(bfloat16* out, const bfloat16* a, const bfloat16* b, int64_t n) {
  residual(out, a, b, n);
}
template <class T>
static void add_bias(T* out, const T* bias, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  bias_kernel<<<capped_blocks(N * C, kThreads), kThreads, 0, stream()>>>(out, bias, N, C);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.bias_forward");
}
void bias_forward(float* out, const float* bias, int64_t N, int64_t C) {
  add_bias(out, bias, N, C);
}
void bias_forward(bfloat16* out, const bfloat16* bias, int64_t N, int64_t C) {
  add_bias(out, bias, N, C);
}
void convert(bfloat16* out, const float* in, int64_t n) {
  convert_to(out, in, n);
}
void convert(float* out, const bfloat16* in, int64_t n) {
  convert_to(out, in, n);
}

void add_inplace(float* acc, const float* x, int64_t n) {
  if (n <= 0) return;
  add_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(acc, x, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.add_inplace");
}

void scale_inplace(float* x, int64_t n, float s) {
  if (n <= 0) return;
  scale_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(x, n, s);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.scale_inplace");
}

void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                     uint64_t base) {
  dropout(out, inp, n, p, seed, rng_stream, base);
}
void dropout_forward(bfloat16* out, const bfloat16* inp, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                     uint64_t base) {
  dropout(out, inp, n, p, seed, rng_stream, base);
}

void dropout_backward(float* dinp, const float* dout, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                      uint64_t base) {
  // The same mask and scale applied to the incoming gradient.
  dropout(dinp, dout, n, p, seed, rng_stream, base);
}
void dropout_backward(bfloat16* dinp, const bfloat16* dout, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                      uint64_t base) {
  dropout(dinp, dout, n, p, seed, rng_stream, base);
}

}  // namespace parallm::kernels::cuda
