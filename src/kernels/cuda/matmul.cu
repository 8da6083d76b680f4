// Linear layers and raw GEMMs on the GPU through cuBLAS. Row-major products
// are computed as their column-major transposes (C^T = op(B)^T op(A)^T), so no
// data is ever transposed. fp32 arithmetic by default; allow_tf32(true) lets
// cuBLAS use TF32 tensor cores. Bias gradients go through the deterministic
// column sum (reduce.h). One cuBLAS handle per process, bound to the compute
// stream. bf16 products (mixed precision) go through cublasGemmEx on tensor
// cores with fp32 accumulation, their C in fp32 (weight gradients, scores,
// logits) or bf16 (activations); the bf16 linear layers with a bias run
// through cuBLASLt with the bias in the epilogue (matmul_lt.cu).
#include <cublas_v2.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "core/env.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_lt.h"
#include "kernels/cuda/reduce.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"

namespace parallm::kernels::cuda {

void check_cublas(cublasStatus_t st, const char* where, const char* call) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    std::string who = gpu::context().empty() ? "" : ", " + gpu::context();
    throw CudaError(where,
                    fmt::format("{}: {} (device {}{})", call, cublasGetStatusString(st), gpu::current_device(), who));
  }
}

namespace {
bool g_tf32 = false;
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // what cuBLAS asks for on Hopper

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    check_cublas(cublasCreate(&x), "kernels.cuda.cublas", "cublasCreate");
    return x;
  }();
  check_cublas(cublasSetStream(h, stream()), "kernels.cuda.cublas", "cublasSetStream");
  // A workspace of ours (setting the stream gives cuBLAS its default pool back): a captured CUDA graph
  // (gpu::Graph) then holds no allocation of cuBLAS's, and eager and captured GEMMs see the same workspace.
  static gpu::DeviceBuffer* ws = new gpu::DeviceBuffer(kCublasWorkspaceBytes, MemCategory::Scratch);  // process-long
  check_cublas(cublasSetWorkspace(h, ws->data(), ws->bytes()), "kernels.cuda.cublas", "cublasSetWorkspace");
  check_cublas(cublasSetMathMode(h, g_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "kernels.cuda.cublas",
               "cublasSetMathMode");
  return h;
}

int as_int(int64_t v, const char* what) {
  PARALLM_CHECK(v >= 0 && v <= 0x7fffffff, ShapeError, "kernels.cuda.gemm", "{} = {} does not fit cuBLAS's int", what,
                v);
  return static_cast<int>(v);
}

// Rows from blockIdx.y on, in steps of gridDim.y; V columns per thread (V = 1,
// or a 16-byte vector where OUT and the pointers allow).
template <class T, int V>
__global__ void add_bias(T* out, const T* bias, int64_t N, int64_t OUT) {
  const int64_t c = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V;
  if (c >= OUT) return;
  if constexpr (V == 1) {
    const float b = to_f(bias[c]);
    for (int64_t r = blockIdx.y; r < N; r += gridDim.y) out[r * OUT + c] = from_f<T>(to_f(out[r * OUT + c]) + b);
  } else {
    const Vec16<T> b = load16(bias + c);
    for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
      Vec16<T> x = load16(out + r * OUT + c);
      for (int k = 0; k < V; ++k) x.set(k, x.get(k) + b.get(k));
      store16(out + r * OUT + c, x);
    }
  }
}

template <class T>
void bias_add(T* out, const T* bias, int64_t N, int64_t OUT) {
  if (!bias || N * OUT <= 0) return;
  constexpr int V = Vec16<T>::n;
  const bool vec = OUT % V == 0 && aligned16(out, bias);
  constexpr int threads = 128;
  const int64_t cols = vec ? OUT / V : OUT;
  const dim3 grid(blocks_for(cols, threads), static_cast<unsigned>(N < 4096 ? N : 4096));
  if (vec)
    add_bias<T, V><<<grid, threads, 0, stream()>>>(out, bias, N, OUT);
  else
    add_bias<T, 1><<<grid, threads, 0, stream()>>>(out, bias, N, OUT);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.matmul_forward");
}

template <class TC>
constexpr cudaDataType_t type_of() {
  return std::is_same_v<TC, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// bf16 A and B, C of type TC, fp32 accumulation; batch 1 is a plain GEMM.
template <class TC>
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
               int64_t stride_a, const bfloat16* B, int64_t ldb, int64_t stride_b, float beta, TC* C, int64_t ldc,
               int64_t stride_c, int64_t batch) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1)
    check_cublas(cublasGemmEx(handle(), opb, opa, as_int(N, "N"), as_int(M, "M"), as_int(K, "K"), &alpha, B,
                              CUDA_R_16BF, as_int(ldb, "ldb"), A, CUDA_R_16BF, as_int(lda, "lda"), &beta, C,
                              type_of<TC>(), as_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "kernels.cuda.gemm", "cublasGemmEx");
  else
    check_cublas(cublasGemmStridedBatchedEx(handle(), opb, opa, as_int(N, "N"), as_int(M, "M"), as_int(K, "K"), &alpha,
                                            B, CUDA_R_16BF, as_int(ldb, "ldb"), stride_b, A, CUDA_R_16BF,
                                            as_int(lda, "lda"), stride_a, &beta, C, type_of<TC>(), as_int(ldc, "ldc"),
                                            stride_c, as_int(batch, "batch"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "kernels.cuda.gemm", "cublasGemmStridedBatchedEx");
}
}  // namespace

void allow_tf32(bool on) {
  g_tf32 = on;
}

std::string blas_library() {
  int v = 0;
  cublasGetVersion(handle(), &v);
  return fmt::format("cuBLAS {}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

void gemm_f16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
              const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  check_cublas(cublasGemmEx(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            as_int(N, "N"), as_int(M, "M"), as_int(K, "K"), &alpha, B, CUDA_R_16F, as_int(ldb, "ldb"),
                            A, CUDA_R_16F, as_int(lda, "lda"), &beta, C, CUDA_R_32F, as_int(ldc, "ldc"),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "kernels.cuda.gemm", "cublasGemmEx");
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  check_cublas(cublasSgemm(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           as_int(N, "N"), as_int(M, "M"), as_int(K, "K"), &alpha, B, as_int(ldb, "ldb"), A,
                           as_int(lda, "lda"), &beta, C, as_int(ldc, "ldc")),
               "kernels.cuda.gemm", "cublasSgemm");
}

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                          float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  check_cublas(cublasSgemmStridedBatched(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(N, "N"), as_int(M, "M"),
                                         as_int(K, "K"), &alpha, B, as_int(ldb, "ldb"), stride_b, A, as_int(lda, "lda"),
                                         stride_a, &beta, C, as_int(ldc, "ldc"), stride_c, as_int(batch, "batch")),
               "kernels.cuda.gemm", "cublasSgemmStridedBatched");
}
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
          const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
          const bfloat16* B, int64_t ldb, float beta, bfloat16* C, int64_t ldc) {
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A,
                          int64_t lda, int64_t stride_a, const bfloat16* B, int64_t ldb, int64_t stride_b, float beta,
                          float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch);
}
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A,
                          int64_t lda, int64_t stride_a, const bfloat16* B, int64_t ldb, int64_t stride_b, float beta,
                          bfloat16* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT) {
  gemm(false, true, N, OUT, IN, 1.0f, inp, IN, weight, IN, 0.0f, out, OUT);
  bias_add(out, bias, N, OUT);
}

namespace {
// PARALLM_CUBLASLT=0 turns the fused paths (bias, residual) off, to compare or to rule them out.
bool use_lt() {
  static const bool on = [] { return env::value(env::Var::CublasLt) != "0"; }();
  return on;
}
}  // namespace

void matmul_forward(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias, int64_t N,
                    int64_t IN, int64_t OUT) {
  if (bias && use_lt() && lt_linear(out, inp, weight, bias, nullptr, N, IN, OUT)) return;
  gemm(false, true, N, OUT, IN, 1.0f, inp, IN, weight, IN, 0.0f, out, OUT);
  bias_add(out, bias, N, OUT);
}

void matmul_forward_residual(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias,
                             const bfloat16* residual, int64_t N, int64_t IN, int64_t OUT) {
  if (use_lt() && lt_linear(out, inp, weight, bias, residual, N, IN, OUT)) return;
  matmul_forward(out, inp, weight, bias, N, IN, OUT);
  residual_forward(out, residual, out, N * OUT);
}

void matmul_backward(bfloat16* dinp, float* dweight, float* dbias, const bfloat16* dout, const bfloat16* inp,
                     const bfloat16* weight, int64_t N, int64_t IN, int64_t OUT) {
  if (dinp) gemm(false, false, N, IN, OUT, 1.0f, dout, OUT, weight, IN, 0.0f, dinp, IN);
  if (dweight) gemm(true, false, OUT, IN, N, 1.0f, dout, OUT, inp, IN, 1.0f, dweight, IN);
  if (dbias) colsum_accumulate(dbias, dout, N, OUT);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  if (dinp) gemm(false, false, N, IN, OUT, 1.0f, dout, OUT, weight, IN, 0.0f, dinp, IN);
  if (dweight) gemm(true, false, OUT, IN, N, 1.0f, dout, OUT, inp, IN, 1.0f, dweight, IN);
  if (dbias) colsum_accumulate(dbias, dout, N, OUT);
}

}  // namespace parallm::kernels::cuda
