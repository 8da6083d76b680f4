// The per-device kernel tables (see ops.h). Each entry is assigned from an
// overload set, so the table's type picks the fp32 or the bf16 kernel.
#include "kernels/ops.h"

#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/elementwise.h"
#include "kernels/stats.h"

namespace parallm::kernels {

namespace {
#define PARALLM_MODEL_OPS(t, ns)                                    \
  t.matmul_forward = &ns::matmul_forward;                           \
  t.matmul_backward = &ns::matmul_backward;                         \
  t.layernorm_forward = &ns::layernorm_forward;                     \
  t.layernorm_backward = &ns::layernorm_backward;                   \
  t.rmsnorm_forward = &ns::rmsnorm_forward;                         \
  t.rmsnorm_backward = &ns::rmsnorm_backward;                       \
  t.rope_pack_forward = &ns::rope_pack_forward;                     \
  t.rope_pack_backward = &ns::rope_pack_backward;                   \
  t.swiglu_forward = &ns::swiglu_forward;                           \
  t.swiglu_backward = &ns::swiglu_backward;                         \
  t.gelu_forward = &ns::gelu_forward;                               \
  t.gelu_backward = &ns::gelu_backward;                             \
  t.attention_forward = &ns::attention_forward;                     \
  t.attention_backward = &ns::attention_backward;                   \
  t.classifier_forward_backward = &ns::classifier_forward_backward; \
  t.classifier_logits = &ns::classifier_logits;                     \
  t.embedding_forward = &ns::embedding_forward;                     \
  t.embedding_backward = &ns::embedding_backward;                   \
  t.residual_forward = &ns::residual_forward;                       \
  t.bias_forward = &ns::bias_forward;                               \
  t.dropout_forward = &ns::dropout_forward;                         \
  t.dropout_backward = &ns::dropout_backward;                       \
  t.vp_embedding_forward = &ns::vp_embedding_forward;               \
  t.vp_embedding_backward = &ns::vp_embedding_backward;             \
  t.xent_vp_local_max = &ns::xent_vp_local_max;                     \
  t.xent_vp_exp_sums = &ns::xent_vp_exp_sums;                       \
  t.xent_vp_losses = &ns::xent_vp_losses;                           \
  t.xent_vp_grad = &ns::xent_vp_grad;                               \
  t.moe_route_forward = &ns::moe_route_forward;                     \
  t.moe_route_backward = &ns::moe_route_backward;                   \
  t.moe_gather = &ns::moe_gather;                                   \
  t.moe_combine = &ns::moe_combine;                                 \
  t.moe_combine_backward = &ns::moe_combine_backward;               \
  t.moe_scatter_add = &ns::moe_scatter_add;                         \
  t.copy_rows = &ns::copy_rows;                                     \
  t.fill = &ns::fill

#define PARALLM_FP32_OPS(ns)                                                    \
  [] {                                                                          \
    Ops t{};                                                                    \
    PARALLM_MODEL_OPS(t, ns);                                                   \
    t.attention_workspace_floats = &ns::attention_workspace_floats;             \
    t.attention_block_forward = &ns::attention_block_forward;                   \
    t.attention_block_backward = &ns::attention_block_backward;                 \
    t.attention_block_workspace_floats = &ns::attention_block_workspace_floats; \
    t.classifier_workspace_floats = &ns::classifier_workspace_floats;           \
    t.add_inplace = &ns::add_inplace;                                           \
    t.scale_inplace = &ns::scale_inplace;                                       \
    t.adamw_runs = &ns::adamw_runs;                                             \
    t.sum_squares = &ns::sum_squares;                                           \
    return t;                                                                   \
  }()
const Ops kCpu = PARALLM_FP32_OPS(cpu);
// Mixed precision with fp32 activations: a device's fp32 table with low-precision products in the linear layers
// and the classifier (the CPU's bf16, or fp16 and FP8 emulated; the GPU's fp16 and FP8 as the CPU's).
Ops with_products(const Ops& base, decltype(&cpu::matmul_forward) fwd, decltype(&cpu::matmul_backward) bwd,
                  decltype(&cpu::classifier_forward_backward) cls, decltype(&cpu::classifier_logits) logits) {
  Ops t = base;
  t.matmul_forward = fwd;
  t.matmul_backward = bwd;
  t.classifier_forward_backward = cls;
  t.classifier_logits = logits;
  return t;
}
const Ops kCpuBf16Products = with_products(kCpu, &cpu::matmul_forward_bf16p, &cpu::matmul_backward_bf16p,
                                           &cpu::classifier_forward_backward_bf16p, &cpu::classifier_logits_bf16p);
const Ops kCpuF16Products = with_products(kCpu, &cpu::matmul_forward_f16p, &cpu::matmul_backward_f16p,
                                          &cpu::classifier_forward_backward_f16p, &cpu::classifier_logits_f16p);
const Ops kCpuFp8Products = with_products(kCpu, &cpu::matmul_forward_fp8p, &cpu::matmul_backward_fp8p,
                                          &cpu::classifier_forward_backward_bf16r, &cpu::classifier_logits_bf16r);
const Ops kCuda = PARALLM_FP32_OPS(cuda);
// The same on the GPU (cuda/lowp.cuh): fp32 activations, fp16 or FP8 products computed as the CPU's.
const Ops kCudaF16Products = with_products(kCuda, &cuda::matmul_forward_f16p, &cuda::matmul_backward_f16p,
                                           &cuda::classifier_forward_backward_f16p, &cuda::classifier_logits_f16p);
const Ops kCudaFp8Products = with_products(kCuda, &cuda::matmul_forward_fp8p, &cuda::matmul_backward_fp8p,
                                           &cuda::classifier_forward_backward_bf16r, &cuda::classifier_logits_bf16r);
const ModelOps<bfloat16> kCudaBf16 = [] {
  ModelOps<bfloat16> t{};
  PARALLM_MODEL_OPS(t, cuda);
  t.attention_workspace_floats = &cuda::attention_workspace_floats_bf16;
  t.classifier_workspace_floats = &cuda::classifier_workspace_floats_bf16;
  t.matmul_forward_residual = &cuda::matmul_forward_residual;
  return t;
}();
// bf16 activations with FP8 products (GPU only): the bf16 table, its linear layers FP8's (matmul.h).
const ModelOps<bfloat16> kCudaFp8Bf16 = [] {
  ModelOps<bfloat16> t = kCudaBf16;
  t.matmul_forward = &cuda::matmul_forward_fp8b;
  t.matmul_forward_residual = &cuda::matmul_forward_residual_fp8b;
  t.matmul_backward = &cuda::matmul_backward_fp8b;
  return t;
}();
#undef PARALLM_FP32_OPS
#undef PARALLM_MODEL_OPS
}  // namespace

const Ops& ops_for(Device dev) {
  return dev.is_cpu() ? kCpu : kCuda;
}

const ModelOps<bfloat16>& bf16_ops_for(Device dev) {
  PARALLM_CHECK(!dev.is_cpu(), ConfigError, "kernels",
                "bf16 activations are GPU only; on the CPU bf16 mixed precision is cpu_bf16_product_ops()");
  return kCudaBf16;
}

const ModelOps<bfloat16>& fp8_bf16_ops_for(Device dev) {
  PARALLM_CHECK(!dev.is_cpu(), ConfigError, "kernels",
                "bf16 activations with FP8 products are GPU only (train.fp8_activations=bf16 needs train.device=cuda)");
  return kCudaFp8Bf16;
}

int64_t fp8_tensor_core_gemms() {
  return cuda::fp8_tensor_core_gemms();
}

const Ops& cpu_bf16_product_ops() {
  PARALLM_CHECK(bf16_products_supported(), ConfigError, "kernels",
                "train.dtype=bf16 on the CPU needs bf16 matrix hardware (AMX or AVX-512 BF16), which this CPU lacks "
                "(oneDNN offers \"{}\"); use train.dtype=fp32",
                bf16_products_impl());
  return kCpuBf16Products;
}

const Ops& f16_product_ops(Device dev) {
  return dev.is_cpu() ? kCpuF16Products : kCudaF16Products;
}

const Ops& fp8_product_ops(Device dev) {
  return dev.is_cpu() ? kCpuFp8Products : kCudaFp8Products;
}

void convert_to_bf16(Device dev, bfloat16* dst, const float* src, int64_t n) {
  if (dev.is_cpu())
    cpu::to_bf16(dst, src, 1, n, n);
  else
    cuda::convert(dst, src, n);
}

void sum_squares_runs(Device dev, const float* base, const int64_t* offset, const int64_t* count, int64_t n,
                      double* out) {
  if (!dev.is_cpu()) return cuda::sum_squares_runs(base, offset, count, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = cpu::sum_squares(base + offset[i], count[i]);
}

void abs_stats(Device dev, AbsStats* out, const float* x, int64_t n) {
  if (dev.is_cpu())
    cpu::abs_stats(out, x, n);
  else
    cuda::abs_stats(out, x, n);
}

void abs_stats(Device dev, AbsStats* out, const bfloat16* x, int64_t n) {
  if (dev.is_cpu())
    cpu::abs_stats(out, x, n);
  else
    cuda::abs_stats(out, x, n);
}

}  // namespace parallm::kernels
