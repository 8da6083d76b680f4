// CPU-only build: every kernels::cuda entry point exists and says that CUDA
// was not built, so the layers above link and test without the toolkit.
#include "core/gpu.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/stats.h"
#include "kernels/swiglu.h"
#include "kernels/vocab_parallel.h"

namespace parallm::kernels::cuda {

namespace {
[[noreturn]] void not_built(const char* op) {
  gpu::throw_not_built(std::string("kernels.cuda.") + op);
}
}  // namespace

void matmul_forward(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("matmul_forward");
}
void matmul_backward(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("matmul_backward");
}
void matmul_forward_f16p(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("matmul_forward_f16p");
}
void matmul_backward_f16p(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("matmul_backward_f16p");
}
void matmul_forward_fp8p(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("matmul_forward_fp8p");
}
void matmul_backward_fp8p(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("matmul_backward_fp8p");
}
void matmul_forward_fp8b(bfloat16*, const bfloat16*, const bfloat16*, const bfloat16*, int64_t, int64_t, int64_t) {
  not_built("matmul_forward_fp8b");
}
void matmul_forward_residual_fp8b(bfloat16*, const bfloat16*, const bfloat16*, const bfloat16*, const bfloat16*,
                                  int64_t, int64_t, int64_t) {
  not_built("matmul_forward_residual_fp8b");
}
void matmul_backward_fp8b(bfloat16*, float*, float*, const bfloat16*, const bfloat16*, const bfloat16*, int64_t,
                          int64_t, int64_t) {
  not_built("matmul_backward_fp8b");
}
int64_t fp8_tensor_core_gemms() {
  return 0;
}
void classifier_forward_backward_f16p(float*, float*, float*, const float*, const float*, const int32_t*, int64_t,
                                      int64_t, int64_t, float, float*) {
  not_built("classifier_forward_backward_f16p");
}
void classifier_logits_f16p(float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("classifier_logits_f16p");
}
void classifier_forward_backward_bf16r(float*, float*, float*, const float*, const float*, const int32_t*, int64_t,
                                       int64_t, int64_t, float, float*) {
  not_built("classifier_forward_backward_bf16r");
}
void classifier_logits_bf16r(float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("classifier_logits_bf16r");
}
void gemm_f16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const uint16_t*, int64_t, float,
              float*, int64_t) {
  not_built("gemm_f16");
}
void allow_tf32(bool) {}
std::string blas_library() {
  return "none (CUDA not built)";
}

void layernorm_forward(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t) {
  not_built("layernorm_forward");
}
void layernorm_backward(float*, float*, float*, const float*, const float*, const float*, const float*, const float*,
                        int64_t, int64_t) {
  not_built("layernorm_backward");
}
void rmsnorm_forward(float*, float*, const float*, const float*, int64_t, int64_t, float) {
  not_built("rmsnorm_forward");
}
void rmsnorm_backward(float*, float*, const float*, const float*, const float*, const float*, int64_t, int64_t) {
  not_built("rmsnorm_backward");
}
void rope_pack_forward(float*, const float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                       int64_t, int64_t) {
  not_built("rope_pack_forward");
}
void rope_pack_backward(float*, float*, float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                        int64_t) {
  not_built("rope_pack_backward");
}
void swiglu_forward(float*, const float*, const float*, int64_t) {
  not_built("swiglu_forward");
}
void swiglu_backward(float*, float*, const float*, const float*, const float*, int64_t) {
  not_built("swiglu_backward");
}
void gelu_forward(float*, const float*, int64_t, GeluKind) {
  not_built("gelu_forward");
}
void gelu_backward(float*, const float*, const float*, int64_t, GeluKind) {
  not_built("gelu_backward");
}
void attention_forward(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t, AttnDropout, float*) {
  not_built("attention_forward");
}
void attention_backward(float*, const float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                        int64_t, AttnDropout, float*) {
  not_built("attention_backward");
}
int64_t attention_workspace_floats(int64_t, int64_t, int64_t, int64_t, int) {
  return 0;
}
void attention_block_forward(float*, float*, const float*, const float*, const float*, const AttnBlock&, AttnDropout,
                             float*) {
  not_built("attention_block_forward");
}
void attention_block_backward(float*, float*, float*, const float*, const float*, const float*, const float*,
                              const float*, const float*, const AttnBlock&, AttnDropout, float*) {
  not_built("attention_block_backward");
}
int64_t attention_block_workspace_floats(int64_t, int64_t, int64_t, int64_t, int64_t, int) {
  return 0;
}
AttentionImpl set_attention_impl(AttentionImpl) {
  return AttentionImpl::Own;
}
AttentionImpl attention_impl() {
  return AttentionImpl::Own;
}
bool cudnn_attention_built() {
  return false;
}
int64_t cudnn_attention_calls() {
  return 0;
}
void classifier_forward_backward(float*, float*, float*, const float*, const float*, const int32_t*, int64_t, int64_t,
                                 int64_t, float, float*) {
  not_built("classifier_forward_backward");
}
int64_t classifier_workspace_floats(int64_t, int64_t, int) {
  return 0;
}
void classifier_logits(float*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("classifier_logits");
}
void embedding_forward(float*, const int32_t*, const float*, const float*, int64_t, int64_t, int64_t) {
  not_built("embedding_forward");
}
void embedding_backward(float*, float*, const float*, const int32_t*, int64_t, int64_t, int64_t) {
  not_built("embedding_backward");
}
void vp_embedding_forward(float*, const int32_t*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                          int64_t) {
  not_built("vp_embedding_forward");
}
void vp_embedding_backward(float*, float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t) {
  not_built("vp_embedding_backward");
}
void xent_vp_grad(float*, const float*, const float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                  float) {
  not_built("xent_vp_grad");
}
void xent_vp_local_max(float*, const float*, int64_t, int64_t, int64_t) {
  not_built("xent_vp_local_max");
}
void xent_vp_exp_sums(float*, const float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t) {
  not_built("xent_vp_exp_sums");
}
void xent_vp_losses(float*, const float*, const float*, int64_t) {
  not_built("xent_vp_losses");
}
void residual_forward(float*, const float*, const float*, int64_t) {
  not_built("residual_forward");
}
void add_inplace(float*, const float*, int64_t) {
  not_built("add_inplace");
}
void scale_inplace(float*, int64_t, float) {
  not_built("scale_inplace");
}
void bias_forward(float*, const float*, int64_t, int64_t) {
  not_built("bias_forward");
}
void dropout_forward(float*, const float*, int64_t, float, uint64_t, uint64_t, uint64_t) {
  not_built("dropout_forward");
}
void dropout_backward(float*, const float*, int64_t, float, uint64_t, uint64_t, uint64_t) {
  not_built("dropout_backward");
}
void copy_rows(float*, int64_t, const float*, int64_t, int64_t, int64_t) {
  not_built("copy_rows");
}
void fill(float*, int64_t, float) {
  not_built("fill");
}
void adamw_step(float*, const float*, float*, float*, int64_t, const AdamWParams&, bfloat16*) {
  not_built("adamw_step");
}
void adamw_runs(float*, const float*, float*, float*, const AdamWRun*, int64_t, const AdamWParams&, bfloat16*) {
  not_built("adamw_runs");
}
void sum_squares_runs(const float*, const int64_t*, const int64_t*, int64_t, double*) {
  not_built("sum_squares_runs");
}
double sum_squares(const float*, int64_t) {
  not_built("sum_squares");
}

void gemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
          int64_t) {
  not_built("gemm");
}
void gemm_strided_batched(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*,
                          int64_t, int64_t, float, float*, int64_t, int64_t, int64_t) {
  not_built("gemm_strided_batched");
}

// bf16 mixed precision.
using bf = bfloat16;
void rmsnorm_forward(bf*, float*, const bf*, const bf*, int64_t, int64_t, float) {
  not_built("rmsnorm_forward");
}
void rmsnorm_backward(bf*, float*, const bf*, const bf*, const bf*, const float*, int64_t, int64_t) {
  not_built("rmsnorm_backward");
}
void rope_pack_forward(bf*, const bf*, const bf*, const bf*, const float*, int64_t, int64_t, int64_t, int64_t,
                       int64_t) {
  not_built("rope_pack_forward");
}
void rope_pack_backward(bf*, bf*, bf*, const bf*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t) {
  not_built("rope_pack_backward");
}
void swiglu_forward(bf*, const bf*, const bf*, int64_t) {
  not_built("swiglu_forward");
}
void swiglu_backward(bf*, bf*, const bf*, const bf*, const bf*, int64_t) {
  not_built("swiglu_backward");
}
void matmul_forward(bf*, const bf*, const bf*, const bf*, int64_t, int64_t, int64_t) {
  not_built("matmul_forward");
}
void matmul_backward(bf*, float*, float*, const bf*, const bf*, const bf*, int64_t, int64_t, int64_t) {
  not_built("matmul_backward");
}
void matmul_forward_residual(bf*, const bf*, const bf*, const bf*, const bf*, int64_t, int64_t, int64_t) {
  not_built("matmul_forward_residual");
}
void gemm(bool, bool, int64_t, int64_t, int64_t, float, const bf*, int64_t, const bf*, int64_t, float, float*,
          int64_t) {
  not_built("gemm");
}
void gemm(bool, bool, int64_t, int64_t, int64_t, float, const bf*, int64_t, const bf*, int64_t, float, bf*, int64_t) {
  not_built("gemm");
}
void gemm_strided_batched(bool, bool, int64_t, int64_t, int64_t, float, const bf*, int64_t, int64_t, const bf*, int64_t,
                          int64_t, float, float*, int64_t, int64_t, int64_t) {
  not_built("gemm_strided_batched");
}
void gemm_strided_batched(bool, bool, int64_t, int64_t, int64_t, float, const bf*, int64_t, int64_t, const bf*, int64_t,
                          int64_t, float, bf*, int64_t, int64_t, int64_t) {
  not_built("gemm_strided_batched");
}
void layernorm_forward(bf*, float*, float*, const bf*, const bf*, const bf*, int64_t, int64_t) {
  not_built("layernorm_forward");
}
void layernorm_backward(bf*, float*, float*, const bf*, const bf*, const bf*, const float*, const float*, int64_t,
                        int64_t) {
  not_built("layernorm_backward");
}
void gelu_forward(bf*, const bf*, int64_t, GeluKind) {
  not_built("gelu_forward");
}
void gelu_backward(bf*, const bf*, const bf*, int64_t, GeluKind) {
  not_built("gelu_backward");
}
void attention_forward(bf*, float*, const bf*, int64_t, int64_t, int64_t, int64_t, AttnDropout, float*) {
  not_built("attention_forward");
}
void attention_backward(bf*, const bf*, const bf*, const bf*, const float*, int64_t, int64_t, int64_t, int64_t,
                        AttnDropout, float*) {
  not_built("attention_backward");
}
int64_t attention_workspace_floats_bf16(int64_t, int64_t, int64_t, int64_t, int) {
  return 0;
}
void classifier_forward_backward(float*, bf*, float*, const bf*, const bf*, const int32_t*, int64_t, int64_t, int64_t,
                                 float, float*) {
  not_built("classifier_forward_backward");
}
int64_t classifier_workspace_floats_bf16(int64_t, int64_t, int) {
  return 0;
}
void classifier_logits(float*, const bf*, const bf*, int64_t, int64_t, int64_t) {
  not_built("classifier_logits");
}
void embedding_forward(bf*, const int32_t*, const bf*, const bf*, int64_t, int64_t, int64_t) {
  not_built("embedding_forward");
}
void embedding_backward(float*, float*, const bf*, const int32_t*, int64_t, int64_t, int64_t) {
  not_built("embedding_backward");
}
void vp_embedding_forward(bf*, const int32_t*, const bf*, const bf*, int64_t, int64_t, int64_t, int64_t, int64_t) {
  not_built("vp_embedding_forward");
}
void vp_embedding_backward(float*, float*, const bf*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t) {
  not_built("vp_embedding_backward");
}
void xent_vp_grad(bf*, const float*, const float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                  float) {
  not_built("xent_vp_grad");
}
void residual_forward(bf*, const bf*, const bf*, int64_t) {
  not_built("residual_forward");
}
void bias_forward(bf*, const bf*, int64_t, int64_t) {
  not_built("bias_forward");
}
void dropout_forward(bf*, const bf*, int64_t, float, uint64_t, uint64_t, uint64_t) {
  not_built("dropout_forward");
}
void dropout_backward(bf*, const bf*, int64_t, float, uint64_t, uint64_t, uint64_t) {
  not_built("dropout_backward");
}
void copy_rows(bf*, int64_t, const bf*, int64_t, int64_t, int64_t) {
  not_built("copy_rows");
}
void fill(bf*, int64_t, float) {
  not_built("fill");
}
void convert(bf*, const float*, int64_t) {
  not_built("convert");
}
void convert(float*, const bf*, int64_t) {
  not_built("convert");
}

void abs_stats(AbsStats*, const float*, int64_t) {
  not_built("abs_stats");
}
void abs_stats(AbsStats*, const bfloat16*, int64_t) {
  not_built("abs_stats");
}

#define PARALLM_MOE_STUBS(T)                                                                                           \
  void moe_route_forward(float*, int32_t*, float*, const T*, const T*, int64_t, int64_t, int64_t, MoeRouting) {        \
    not_built("moe_route_forward");                                                                                    \
  }                                                                                                                    \
  void moe_route_backward(T*, const float*, const T*, const int32_t*, const float*, const float*, float, int64_t,      \
                          int64_t, int64_t, MoeRouting) {                                                              \
    not_built("moe_route_backward");                                                                                   \
  }                                                                                                                    \
  void moe_gather(T*, const T*, const int32_t*, int64_t, int64_t) {                                                    \
    not_built("moe_gather");                                                                                           \
  }                                                                                                                    \
  void moe_combine(T*, const T*, const int32_t*, const float*, int64_t, int64_t, int64_t) {                            \
    not_built("moe_combine");                                                                                          \
  }                                                                                                                    \
  void moe_combine_backward(T*, float*, const T*, const T*, const int32_t*, const float*, int64_t, int64_t, int64_t) { \
    not_built("moe_combine_backward");                                                                                 \
  }                                                                                                                    \
  void moe_scatter_add(T*, const T*, const int32_t*, int64_t, int64_t, int64_t) {                                      \
    not_built("moe_scatter_add");                                                                                      \
  }
PARALLM_MOE_STUBS(float)
PARALLM_MOE_STUBS(bfloat16)
#undef PARALLM_MOE_STUBS

}  // namespace parallm::kernels::cuda
