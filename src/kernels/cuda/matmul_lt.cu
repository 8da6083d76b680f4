// The bf16 linear layer through cuBLASLt, bias in the epilogue (and a
// residual added as C with beta = 1 where asked): one pass over the output
// instead of a GEMM and a bias (and residual) kernel. Row-major out = inp W^T is
// the column-major out^T = W^T(op T) inp^T, as in matmul.cu. A plan (matmul
// descriptor, layouts and the heuristic's first algorithm) is built once per
// shape and kept; only the bias pointer changes between calls. The 32 MiB
// workspace is allocated once (Scratch) and kept for the process. Also the
// FP8 GEMM of tensorwise-scaled operands (lowp_products.cu), planned the same way.
#include <cublasLt.h>

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "core/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_lt.h"

namespace parallm::kernels::cuda {

namespace {
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x = nullptr;
    check_cublas(cublasLtCreate(&x), "kernels.cuda.cublaslt", "cublasLtCreate");
    return x;
  }();
  return h;
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

const char* kWhere = "kernels.cuda.matmul_forward";

// The heuristic's first algorithm for the plan's descriptor and layouts (ok: one was found), within the
// workspace; c_align (> 0): the alignment C and D are known to have (a weight gradient anywhere in a flat buffer),
// so algorithms that assume more are not offered.
void pick_algorithm(Plan& p, uint32_t c_align) {
  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), kWhere, "cublasLtMatmulPreferenceCreate");
  const size_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  if (c_align > 0) {
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_align, sizeof(c_align));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_align, sizeof(c_align));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_handle(), p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.ok) p.algo = result.algo;
}

std::unique_ptr<Plan> make_plan(int64_t N, int64_t IN, int64_t OUT, bool bias) {
  auto p = std::make_unique<Plan>();
  check_cublas(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), kWhere, "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), kWhere,
               "cublasLtMatmulDescSetAttribute(TRANSA)");
  check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), kWhere,
               "cublasLtMatmulDescSetAttribute(TRANSB)");
  check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), kWhere,
               "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  // Column-major views: W as [IN, OUT] (transposed by the op), inp as [IN, N], out as [OUT, N].
  check_cublas(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, IN, OUT, IN), kWhere, "cublasLtMatrixLayoutCreate");
  check_cublas(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, IN, N, IN), kWhere, "cublasLtMatrixLayoutCreate");
  check_cublas(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, OUT, N, OUT), kWhere, "cublasLtMatrixLayoutCreate");
  pick_algorithm(*p, 0);
  return p;
}
// The largest power of two (up to 256) dividing a pointer: what a plan may assume of its alignment.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// Row-major C[M, N] = A[M, K] B[N, K]^T is column-major C^T (N x M) = B (op T of its K x N view) times A^T
// (its K x M view): cuBLASLt's A slot takes B, its B slot takes A; C and D fp32, or bf16 (bf16 activations, with a
// bf16 bias over N in the epilogue where `bias`).
std::unique_ptr<Plan> make_fp8_plan(int64_t M, int64_t N, int64_t K, bool a_e4m3, bool b_e4m3, uint32_t c_align,
                                    bool bf16_out, bool bias) {
  const char* where = "kernels.cuda.fp8_gemm";
  auto p = std::make_unique<Plan>();
  if (cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return p;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  // Fast accumulation (fewer promotions of the tensor cores' partial sums) in the bf16-activation path's forward
  // only, as Transformer Engine's recipe; gradients, and the fp32-activation path (the CPU's products), without.
  const int8_t fast = bf16_out && a_e4m3 ? 1 : 0;
  check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), where,
               "cublasLtMatmulDescSetAttribute(TRANSA)");
  check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), where,
               "cublasLtMatmulDescSetAttribute(TRANSB)");
  check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)), where,
               "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bt = CUDA_R_16BF;
    check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), where,
                 "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)), where,
                 "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
  }
  const cudaDataType_t ea = b_e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2, eb = a_e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  if (cublasLtMatrixLayoutCreate(&p->a, ea, K, N, K) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p->b, eb, K, M, K) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p->c, bf16_out ? CUDA_R_16BF : CUDA_R_32F, N, M, N) != CUBLAS_STATUS_SUCCESS)
    return p;
  pick_algorithm(*p, c_align);
  return p;
}

using Fp8Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, uint32_t, bool, bool>;  // ..., bf16 out, bias
Plan& fp8_plan(const Fp8Key& key) {
  static std::map<Fp8Key, std::unique_ptr<Plan>> plans;
  if (plans.size() >= 256) plans.clear();
  auto& plan = plans[key];
  if (!plan) {
    const auto& [M, N, K, a4, b4, al, bf, bias] = key;
    plan = make_fp8_plan(M, N, K, a4, b4, al, bf, bias);
  }
  return *plan;
}

gpu::DeviceBuffer& workspace() {
  static gpu::DeviceBuffer* ws = new gpu::DeviceBuffer(kWorkspaceBytes, MemCategory::Scratch);  // kept for the process
  return *ws;
}
}  // namespace

bool lt_fp8_ready(const float* C, bool a_e4m3, bool b_e4m3, int64_t M, int64_t N, int64_t K) {
  return M > 0 && N > 0 && K > 0 && fp8_plan({M, N, K, a_e4m3, b_e4m3, alignment_of(C), false, false}).ok;
}

// The alignment a bf16-output plan may assume: D's and the residual's (C), the lesser.
uint32_t linear_alignment(const bfloat16* D, const bfloat16* residual) {
  return residual ? std::min(alignment_of(D), alignment_of(residual)) : alignment_of(D);
}

bool lt_fp8_linear_ready(const bfloat16* D, bool a_e4m3, const bfloat16* bias, const bfloat16* residual, int64_t M,
                         int64_t N, int64_t K) {
  if (bias && alignment_of(bias) < 16) return false;  // cuBLASLt's epilogue reads the bias in vectors
  return M > 0 && N > 0 && K > 0 &&
         fp8_plan({M, N, K, a_e4m3, true, linear_alignment(D, residual), true, bias != nullptr}).ok;
}

namespace {
// Our A's and B's dequantization scales (device pointers) on a plan: cuBLASLt's A slot holds our B.
void set_scales(Plan& plan, const float* sa, const float* sb) {
  const char* where = "kernels.cuda.fp8_gemm";
  check_cublas(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof(sb)), where,
               "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
  check_cublas(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof(sa)), where,
               "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
}
}  // namespace

bool lt_fp8_gemm(float* C, const uint8_t* A, bool a_e4m3, const uint8_t* B, bool b_e4m3, int64_t M, int64_t N,
                 int64_t K, const float* sa, const float* sb, float beta) {
  if (M <= 0 || N <= 0) return true;
  Plan* plan = &fp8_plan({M, N, K, a_e4m3, b_e4m3, alignment_of(C), false, false});
  if (!plan->ok) return false;
  const char* where = "kernels.cuda.fp8_gemm";
  set_scales(*plan, sa, sb);
  const float alpha = 1.0f;
  check_cublas(cublasLtMatmul(lt_handle(), plan->desc, &alpha, B, plan->a, A, plan->b, &beta, C, plan->c, C, plan->c,
                              &plan->algo, workspace().as<void>(), kWorkspaceBytes, stream()),
               where, "cublasLtMatmul");
  return true;
}

bool lt_fp8_linear(bfloat16* D, const uint8_t* A, bool a_e4m3, const uint8_t* B, int64_t M, int64_t N, int64_t K,
                   const float* sa, const float* sb, const bfloat16* bias, const bfloat16* residual) {
  if (M <= 0 || N <= 0) return true;
  if (bias && alignment_of(bias) < 16) return false;
  Plan* plan = &fp8_plan({M, N, K, a_e4m3, true, linear_alignment(D, residual), true, bias != nullptr});
  if (!plan->ok) return false;
  const char* where = "kernels.cuda.fp8_gemm";
  set_scales(*plan, sa, sb);
  if (bias)
    check_cublas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                 where, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  const float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
  const void* c = residual ? static_cast<const void*>(residual) : static_cast<const void*>(D);
  check_cublas(cublasLtMatmul(lt_handle(), plan->desc, &alpha, B, plan->a, A, plan->b, &beta, c, plan->c, D, plan->c,
                              &plan->algo, workspace().as<void>(), kWorkspaceBytes, stream()),
               where, "cublasLtMatmul");
  return true;
}

bool lt_linear(bfloat16* out, const bfloat16* inp, const bfloat16* weight, const bfloat16* bias,
               const bfloat16* residual, int64_t N, int64_t IN, int64_t OUT) {
  if (N <= 0 || OUT <= 0) return true;
  static std::map<std::tuple<int64_t, int64_t, int64_t, bool>, std::unique_ptr<Plan>> plans;
  if (plans.size() >= 256) plans.clear();  // sampling makes one shape per sequence length
  auto& plan = plans[{N, IN, OUT, bias != nullptr}];
  if (!plan) plan = make_plan(N, IN, OUT, bias != nullptr);
  if (!plan->ok) return false;
  if (bias)
    check_cublas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                 kWhere, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  const float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
  const void* c = residual ? static_cast<const void*>(residual) : static_cast<const void*>(out);
  check_cublas(cublasLtMatmul(lt_handle(), plan->desc, &alpha, weight, plan->a, inp, plan->b, &beta, c, plan->c, out,
                              plan->c, &plan->algo, workspace().as<void>(), kWorkspaceBytes, stream()),
               kWhere, "cublasLtMatmul");
  return true;
}

}  // namespace parallm::kernels::cuda
