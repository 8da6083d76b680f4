// The linear layers' low-precision products on the GPU with fp32 activations
// (design in lowp.cuh): rounding kernels, FP8 rows, and matmul forward and
// backward per policy, as cpu/matmul.cpp's lowp and fp8p functions. The bias
// and its gradient stay fp32 (the unrounded d(output)).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "core/gpu.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/lowp.cuh"
#include "kernels/cuda/matmul_lt.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.0f, kE5M2Max = 57344.0f;

__global__ void round_f16_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}

// cpu/fp8.cpp's round_bits: nearest even to M mantissa bits, smallest normal exponent EMIN, saturating at max.
template <int M, int EMIN>
__device__ __forceinline__ float round_bits(float x, float max) {
  uint32_t u = __float_as_uint(x);
  const uint32_t sign = u & 0x80000000u;
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) return x;
  float r;
  if (u < (static_cast<uint32_t>(EMIN + 127) << 23)) {
    const float up = static_cast<float>(1u << (M - EMIN)), down = 1.0f / up;  // exact powers of two
    r = rintf(__uint_as_float(u) * up) * down;
  } else {
    constexpr int shift = 23 - M;
    u += ((1u << (shift - 1)) - 1) + ((u >> shift) & 1u);
    u &= ~((1u << shift) - 1);
    r = __uint_as_float(u);
  }
  return __uint_as_float(__float_as_uint(fminf(r, max)) | sign);
}

// cpu/fp8.cpp's scale_exponent: the least e with amax 2^-e <= max.
__device__ int scale_exponent(float amax, float max) {
  int e = 0;
  frexpf(amax / max, &e);
  e = e < -120 ? -120 : (e > 120 ? 120 : e);
  while (e > -120 && ldexpf(amax, -(e - 1)) <= max) --e;
  while (ldexpf(amax, -e) > max) ++e;
  return e;
}

// One block per row: the largest |x| (inf where any element is not finite); fp32 or bf16 rows.
template <class S>
__global__ void row_amax_kernel(float* amax, const S* src, int64_t cols) {
  __shared__ float sh[32];
  const S* s = src + blockIdx.x * cols;
  float m = 0.0f, bad = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = to_f(s[j]);
    m = fmaxf(m, fabsf(v));
    if (!isfinite(v)) bad = 1.0f;
  }
  m = block_max(m, sh);
  bad = block_max(bad, sh);
  if (threadIdx.x == 0) amax[blockIdx.x] = bad > 0.0f ? INFINITY : m;
}

// Tensorwise: the largest of n row maxima into amax[0] (one block).
__global__ void collapse_amax_kernel(float* amax, int64_t n) {
  __shared__ float sh[32];
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, amax[i]);
  m = block_max(m, sh);
  if (threadIdx.x == 0) amax[0] = m;
}

// Row r's maximum at amax[r * astride] (0: one for every row, tensorwise).
template <int M, int EMIN>
__global__ void quantize_rows_kernel(bfloat16* dst, const float* src, int64_t cols, const float* amax, int64_t astride,
                                     float max) {
  const float a = amax[blockIdx.x * astride];
  const float* s = src + blockIdx.x * cols;
  bfloat16* d = dst + blockIdx.x * cols;
  if (!(a > 0.0f) || !isfinite(a)) {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) d[j] = from_f<bfloat16>(s[j]);
    return;
  }
  const int e = scale_exponent(a, max);
  const float down = ldexpf(1.0f, -e), up = ldexpf(1.0f, e);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    d[j] = from_f<bfloat16>(round_bits<M, EMIN>(s[j] * down, max) * up);  // exact in bf16
}

// Tensorwise FP8 for the tensor cores: scale[0] = 2^e (the dequantization scale), scale[1] = 2^-e, e from the
// tensor's reduced maximum (cpu/fp8.cpp's exponent); an all-zero tensor gets the scale 1. A tensor that is not
// finite gets NaN codes: every product it enters is NaN, where the CPU (which keeps such a tensor unrounded) has
// non-finite values only in the rows and columns the inf or NaN reaches. Either way the step is not finite.
__global__ void fp8_scale_kernel(float* scale, const float* amax, float max) {
  const float a = amax[0];
  if (!isfinite(a)) {
    scale[0] = 1.0f;
    scale[1] = __int_as_float(0x7fc00000);
    return;
  }
  const int e = a > 0.0f ? scale_exponent(a, max) : 0;
  scale[0] = ldexpf(1.0f, e);
  scale[1] = ldexpf(1.0f, -e);
}

// FP8 codes of src * scale[1] (nearest even, saturating: cvt.rn.satfinite, cpu/fp8.cpp's rounding), [rows, cols]
// as they are, or transposed into [cols, rows] through 32 x 32 tiles.
template <class F, class S>
__global__ void fp8_codes_kernel(uint8_t* dst, const S* src, int64_t n, const float* scale) {
  const float s = scale[1];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = F(to_f(src[i]) * s).__x;
}
template <class F, class S>
__global__ void fp8_codes_t_kernel(uint8_t* dst, const S* src, int64_t rows, int64_t cols, const float* scale) {
  __shared__ float tile[32][33];
  const float s = scale[1];
  const int64_t r0 = blockIdx.x * 32LL, c0 = blockIdx.y * 32LL;  // rows (tokens, possibly many) on x
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = to_f(src[r * cols + c]);
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = F(tile[threadIdx.x][k] * s).__x;
  }
}

std::atomic<int64_t> g_fp8_gemms{0};

// One operand's tensorwise scale (into scale[0..1]) from its maximum, reduced over the tensor's ranks.
template <class S>
void tensor_scale(float* scale, const S* src, int64_t rows, int64_t cols, Fp8Format f, const Fp8Tensorwise& tw) {
  float* amax = lowp_scratch<float>(3, rows);
  row_amax_kernel<S><<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(amax, src, cols);
  collapse_amax_kernel<<<1, kThreads, 0, stream()>>>(amax, rows);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.fp8_scale");
  tw.reduce(amax, 1);
  fp8_scale_kernel<<<1, 1, 0, stream()>>>(scale, amax, f == Fp8Format::E4M3 ? kE4M3Max : kE5M2Max);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.fp8_scale");
}

// The operand's codes in slot `slot`, [rows, cols] or transposed.
template <class S>
const uint8_t* fp8_codes(int slot, const S* src, int64_t rows, int64_t cols, Fp8Format f, const float* scale,
                         bool transposed) {
  uint8_t* d = lowp_scratch<uint8_t>(slot, rows * cols);
  const bool e4 = f == Fp8Format::E4M3;
  if (!transposed) {
    const int64_t n = rows * cols;
    if (e4)
      fp8_codes_kernel<__nv_fp8_e4m3, S><<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(d, src, n, scale);
    else
      fp8_codes_kernel<__nv_fp8_e5m2, S><<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(d, src, n, scale);
  } else {
    const dim3 grid(static_cast<unsigned>((rows + 31) / 32), static_cast<unsigned>((cols + 31) / 32)), block(32, 8);
    if (e4)
      fp8_codes_t_kernel<__nv_fp8_e4m3, S><<<grid, block, 0, stream()>>>(d, src, rows, cols, scale);
    else
      fp8_codes_t_kernel<__nv_fp8_e5m2, S><<<grid, block, 0, stream()>>>(d, src, rows, cols, scale);
  }
  PARALLM_CUDA_LAUNCHED("kernels.cuda.fp8_codes");
  return d;
}

// Whether the linear layer's three products (N tokens, IN x OUT) can run on FP8 tensor cores: tensorwise scaling,
// a device with them (sm_89 and later) and every dimension a multiple of 16 (cuBLASLt's FP8 layouts).
bool fp8_tensor_cores(int64_t N, int64_t IN, int64_t OUT) {
  static const bool device = gpu::compute_capability(gpu::current_device()) >= 89;
  return fp8_context().tensorwise.on && device && N > 0 && IN > 0 && OUT > 0 && N % 16 == 0 && IN % 16 == 0 &&
         OUT % 16 == 0;
}

// cpu/matmul.cpp's matmul_forward_lowp / matmul_backward_lowp on the device.
template <class P>
void forward_lowp(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                  int64_t OUT) {
  const auto* x = P::operand(0, inp, N * IN);
  const auto* w = P::operand(1, weight, OUT * IN);
  P::gemm(false, true, N, OUT, IN, x, w, 0.0f, out, OUT);
  if (bias) bias_forward(out, bias, N, OUT);
}

template <class P>
void backward_lowp(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                   int64_t N, int64_t IN, int64_t OUT) {
  const auto* d = P::operand(0, dout, N * OUT);
  const auto* x = dweight ? P::operand(1, inp, N * IN) : nullptr;
  const auto* w = dinp ? P::operand(2, weight, OUT * IN) : nullptr;
  if (dinp) P::gemm(false, false, N, IN, OUT, d, w, 0.0f, dinp, IN);
  if (dweight) P::gemm(true, false, OUT, IN, N, d, x, 1.0f, dweight, IN);
  if (dbias) matmul_backward(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, IN, OUT);
}
}  // namespace

template <class T>
T* lowp_scratch(int slot, int64_t n) {
  static std::array<gpu::DeviceBuffer, 4> slots;
  gpu::DeviceBuffer& b = slots.at(static_cast<size_t>(slot));
  const size_t bytes = sizeof(T) * static_cast<size_t>(std::max<int64_t>(n, 1));
  if (b.bytes() < bytes) b = gpu::DeviceBuffer(bytes, MemCategory::Scratch);
  return b.as<T>();
}
template float* lowp_scratch<float>(int, int64_t);
template bfloat16* lowp_scratch<bfloat16>(int, int64_t);
template uint8_t* lowp_scratch<uint8_t>(int, int64_t);
template uint16_t* lowp_scratch<uint16_t>(int, int64_t);

void round_to(uint16_t* dst, const float* src, int64_t n) {
  if (n <= 0) return;
  round_f16_kernel<<<capped_blocks(n, kThreads), kThreads, 0, stream()>>>(dst, src, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.round_f16");
}
void round_to(bfloat16* dst, const float* src, int64_t n) {
  convert(dst, src, n);
}

void lowp_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, const uint16_t* B, float beta,
               float* C, int64_t ldc) {
  gemm_f16(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, ldc);
}
void lowp_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, const bfloat16* B, float beta,
               float* C, int64_t ldc) {
  gemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, ldc);
}

void fp8_rows(bfloat16* dst, const float* src, int64_t rows, int64_t cols, Fp8Format f, const Fp8RowMax& reduce,
              float* amax) {
  if (rows <= 0) return;
  row_amax_kernel<float><<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(amax, src, cols);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.fp8_rows");
  const Fp8Tensorwise& tw = fp8_context().tensorwise;
  int64_t astride = 1;
  if (tw.on) {  // one scale (cpu/fp8.h): the largest row maximum, reduced over the tensor's ranks
    collapse_amax_kernel<<<1, kThreads, 0, stream()>>>(amax, rows);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.fp8_rows");
    tw.reduce(amax, 1);
    astride = 0;
  } else {
    reduce(amax, rows);  // over the layer's split (a device all-reduce; returns once the result is there)
  }
  if (f == Fp8Format::E4M3)
    quantize_rows_kernel<3, -6>
        <<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(dst, src, cols, amax, astride, kE4M3Max);
  else
    quantize_rows_kernel<2, -14>
        <<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(dst, src, cols, amax, astride, kE5M2Max);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.fp8_rows");
}

void matmul_forward_f16p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT) {
  forward_lowp<F16Products>(out, inp, weight, bias, N, IN, OUT);
}
void matmul_backward_f16p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  backward_lowp<F16Products>(dinp, dweight, dbias, dout, inp, weight, N, IN, OUT);
}

int64_t fp8_tensor_core_gemms() {
  return g_fp8_gemms.load();
}

namespace {
// A product planned by lt_fp8_ready / lt_fp8_linear_ready (B always E4M3 here): cuBLASLt took it then, so a decline
// now is a bug; counted. Into fp32 C (beta), or bf16 D with the bias and residual in the epilogue.
void planned_fp8_gemm(float* C, const uint8_t* A, bool a_e4m3, const uint8_t* B, int64_t M, int64_t N, int64_t K,
                      const float* sa, const float* sb, float beta) {
  PARALLM_CHECK(lt_fp8_gemm(C, A, a_e4m3, B, true, M, N, K, sa, sb, beta), InternalError, "kernels.cuda.fp8_gemm",
                "a planned FP8 product ({} x {} x {}) was declined", M, N, K);
  g_fp8_gemms += 1;
}
void planned_fp8_gemm(bfloat16* D, const uint8_t* A, bool a_e4m3, const uint8_t* B, int64_t M, int64_t N, int64_t K,
                      const float* sa, const float* sb, const bfloat16* bias = nullptr,
                      const bfloat16* residual = nullptr) {
  PARALLM_CHECK(lt_fp8_linear(D, A, a_e4m3, B, M, N, K, sa, sb, bias, residual), InternalError, "kernels.cuda.fp8_gemm",
                "a planned FP8 product ({} x {} x {}) was declined", M, N, K);
  g_fp8_gemms += 1;
}
bool fp8_ready(const float* C, bool a_e4m3, int64_t M, int64_t N, int64_t K) {
  return lt_fp8_ready(C, a_e4m3, true, M, N, K);
}
bool fp8_ready(const bfloat16* D, bool a_e4m3, int64_t M, int64_t N, int64_t K, const bfloat16* bias = nullptr,
               const bfloat16* residual = nullptr) {
  return lt_fp8_linear_ready(D, a_e4m3, bias, residual, M, N, K);
}

// The tensorwise FP8 products on FP8 tensor cores: one scale per operand (the same for its transposed codes),
// the codes those of cpu/fp8.cpp's rounding, from fp32 activations (out fp32; the caller adds the bias) or bf16
// ones (train.fp8_activations=bf16: the codes drawn from bf16, out bf16 with the bias and a residual in the
// epilogue). False where cuBLASLt declines the product, asked before any maximum is reduced: the caller falls back
// with no collective spent and nothing written.
template <class A>
bool forward_fp8_cores(A* out, const A* inp, const A* weight, int64_t N, int64_t IN, int64_t OUT,
                       const bfloat16* bias = nullptr, const bfloat16* residual = nullptr) {
  if (!fp8_tensor_cores(N, IN, OUT)) return false;
  if constexpr (std::is_same_v<A, float>) {
    if (!fp8_ready(out, true, N, OUT, IN)) return false;
  } else if (!fp8_ready(out, true, N, OUT, IN, bias, residual)) {
    return false;
  }
  const Fp8Tensorwise& tw = fp8_context().tensorwise;
  float* s = lowp_scratch<float>(2, 6);
  tensor_scale(s, inp, N, IN, Fp8Format::E4M3, tw);
  tensor_scale(s + 2, weight, OUT, IN, Fp8Format::E4M3, tw);
  const uint8_t* x = fp8_codes(0, inp, N, IN, Fp8Format::E4M3, s, false);
  const uint8_t* w = fp8_codes(1, weight, OUT, IN, Fp8Format::E4M3, s + 2, false);
  if constexpr (std::is_same_v<A, float>)
    planned_fp8_gemm(out, x, true, w, N, OUT, IN, s, s + 2, 0.0f);
  else
    planned_fp8_gemm(out, x, true, w, N, OUT, IN, s, s + 2, bias, residual);
  return true;
}

// d(output) in E5M2, the weight and the input in E4M3: dinp[N, IN] = d W (W transposed, K = OUT; fp32 or bf16 as
// the activations), dweight[OUT, IN] += d^T x in fp32 (both transposed, K = N). All or nothing: false, before
// anything is reduced or written, where cuBLASLt declines either product.
template <class A>
bool backward_fp8_cores(A* dinp, float* dweight, const A* dout, const A* inp, const A* weight, int64_t N, int64_t IN,
                        int64_t OUT) {
  if (!fp8_tensor_cores(N, IN, OUT) || (dinp && !fp8_ready(dinp, false, N, IN, OUT)) ||
      (dweight && !fp8_ready(dweight, false, OUT, IN, N)))
    return false;
  const Fp8Tensorwise& tw = fp8_context().tensorwise;
  float* s = lowp_scratch<float>(2, 6);
  tensor_scale(s, dout, N, OUT, Fp8Format::E5M2, tw);
  if (dinp) {
    tensor_scale(s + 2, weight, OUT, IN, Fp8Format::E4M3, tw);
    const uint8_t* d = fp8_codes(0, dout, N, OUT, Fp8Format::E5M2, s, false);
    const uint8_t* wt = fp8_codes(2, weight, OUT, IN, Fp8Format::E4M3, s + 2, true);
    if constexpr (std::is_same_v<A, float>)
      planned_fp8_gemm(dinp, d, false, wt, N, IN, OUT, s, s + 2, 0.0f);
    else
      planned_fp8_gemm(dinp, d, false, wt, N, IN, OUT, s, s + 2);
  }
  if (dweight) {
    tensor_scale(s + 4, inp, N, IN, Fp8Format::E4M3, tw);
    const uint8_t* dt = fp8_codes(3, dout, N, OUT, Fp8Format::E5M2, s, true);
    const uint8_t* xt = fp8_codes(1, inp, N, IN, Fp8Format::E4M3, s + 4, true);
    planned_fp8_gemm(dweight, dt, false, xt, OUT, IN, N, s, s + 4, 1.0f);
  }
  return true;
}
}  // namespace

void matmul_forward_fp8b(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias, int64_t N,
                         int64_t IN, int64_t OUT) {
  if (fp8_context().on && forward_fp8_cores(out, inp, weight, N, IN, OUT, bias)) return;
  matmul_forward(out, inp, weight, bias, N, IN, OUT);
}
void matmul_forward_residual_fp8b(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias,
                                  const bfloat16* residual, int64_t N, int64_t IN, int64_t OUT) {
  if (fp8_context().on && forward_fp8_cores(out, inp, weight, N, IN, OUT, bias, residual)) return;
  matmul_forward_residual(out, inp, weight, bias, residual, N, IN, OUT);
}
void matmul_backward_fp8b(bfloat16* dinp, float* dweight, float* dbias, const bfloat16* dout, const bfloat16* inp,
                          const bfloat16* weight, int64_t N, int64_t IN, int64_t OUT) {
  if (fp8_context().on && (dinp || dweight) && backward_fp8_cores(dinp, dweight, dout, inp, weight, N, IN, OUT)) {
    if (dbias) matmul_backward(static_cast<bfloat16*>(nullptr), nullptr, dbias, dout, nullptr, nullptr, N, IN, OUT);
    return;
  }
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IN, OUT);
}

// cpu/matmul.cpp's FP8 products: inside an FP8 scope each operand's rows scaled and rounded (E4M3 for the input
// and the weight, E5M2 for d(output)), each row's maximum reduced over the layer's split; outside it bf16-rounded.
void matmul_forward_fp8p(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                         int64_t OUT) {
  const Fp8Context& c = fp8_context();
  if (!c.on) return forward_lowp<Bf16Rounded>(out, inp, weight, bias, N, IN, OUT);
  if (forward_fp8_cores(out, inp, weight, N, IN, OUT)) {
    if (bias) bias_forward(out, bias, N, OUT);
    return;
  }
  float* amax = lowp_scratch<float>(3, std::max(N, OUT));
  bfloat16* x = lowp_scratch<bfloat16>(0, N * IN);
  fp8_rows(x, inp, N, IN, Fp8Format::E4M3, c.split_in, amax);
  bfloat16* w = lowp_scratch<bfloat16>(1, OUT * IN);
  fp8_rows(w, weight, OUT, IN, Fp8Format::E4M3, c.split_in, amax);
  Bf16Rounded::gemm(false, true, N, OUT, IN, x, w, 0.0f, out, OUT);
  if (bias) bias_forward(out, bias, N, OUT);
}

void matmul_backward_fp8p(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  const Fp8Context& c = fp8_context();
  if (!c.on) return backward_lowp<Bf16Rounded>(dinp, dweight, dbias, dout, inp, weight, N, IN, OUT);
  if ((dinp || dweight) && backward_fp8_cores(dinp, dweight, dout, inp, weight, N, IN, OUT)) {
    if (dbias) matmul_backward(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, IN, OUT);
    return;
  }
  float* amax = lowp_scratch<float>(3, std::max(N, OUT));
  bfloat16* d = lowp_scratch<bfloat16>(0, N * OUT);
  fp8_rows(d, dout, N, OUT, Fp8Format::E5M2, c.split_out, amax);
  if (dinp) {
    bfloat16* w = lowp_scratch<bfloat16>(2, OUT * IN);
    fp8_rows(w, weight, OUT, IN, Fp8Format::E4M3, c.split_in, amax);
    Bf16Rounded::gemm(false, false, N, IN, OUT, d, w, 0.0f, dinp, IN);
  }
  if (dweight) {
    bfloat16* x = lowp_scratch<bfloat16>(1, N * IN);
    fp8_rows(x, inp, N, IN, Fp8Format::E4M3, c.split_in, amax);
    Bf16Rounded::gemm(true, false, OUT, IN, N, d, x, 1.0f, dweight, IN);
  }
  if (dbias) matmul_backward(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, IN, OUT);
}

}  // namespace parallm::kernels::cuda
