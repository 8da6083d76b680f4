// The kernels of one device as a table of function pointers, so a model or an
// optimizer written once runs on the CPU (kernels::cpu) or the GPU
// (kernels::cuda): it holds `const Ops& k = ops_for(device)` and calls
// k.layernorm_forward(...). The signatures are the contract headers'.
#pragma once
#include "core/device.h"
#include "core/dtype.h"
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

namespace parallm::kernels {

// The kernels a model calls, for activations (and compute weights) of type A:
// float on either device, or bfloat16 on the GPU (mixed precision: weight
// gradients, statistics, losses and workspaces stay fp32).
template <class A>
struct ModelOps {
  using I = int64_t;
  void (*matmul_forward)(A* out, const A* inp, const A* weight, const A* bias, I N, I IN, I OUT);
  // Optional (nullptr: the model runs matmul_forward, then residual_forward):
  // out = residual + matmul(inp), one pass.
  void (*matmul_forward_residual)(A* out, const A* inp, const A* weight, const A* bias, const A* residual, I N, I IN,
                                  I OUT);
  void (*matmul_backward)(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp, const A* weight, I N,
                          I IN, I OUT);
  void (*layernorm_forward)(A* out, float* mean, float* rstd, const A* inp, const A* w, const A* b, I N, I C);
  void (*layernorm_backward)(A* dinp, float* dw, float* db, const A* dout, const A* inp, const A* w, const float* mean,
                             const float* rstd, I N, I C);
  // The Llama family's layers (rmsnorm.h, rope.h, swiglu.h).
  void (*rmsnorm_forward)(A* out, float* rstd, const A* inp, const A* w, I N, I C, float eps);
  void (*rmsnorm_backward)(A* dinp, float* dw, const A* dout, const A* inp, const A* w, const float* rstd, I N, I C);
  void (*rope_pack_forward)(A* qkv, const A* q, const A* k, const A* v, const float* rope, I B, I T, I H, I KV, I D);
  void (*rope_pack_backward)(A* dq, A* dk, A* dv, const A* dqkv, const float* rope, I B, I T, I H, I KV, I D);
  void (*swiglu_forward)(A* out, const A* gate, const A* up, I n);
  void (*swiglu_backward)(A* dgate, A* dup, const A* dout, const A* gate, const A* up, I n);
  void (*gelu_forward)(A* out, const A* inp, I n, GeluKind kind);
  void (*gelu_backward)(A* dinp, const A* inp, const A* dout, I n, GeluKind kind);
  void (*attention_forward)(A* out, float* lse, const A* qkv, I B, I T, I C, I NH, AttnDropout drop, float* ws);
  void (*attention_backward)(A* dqkv, const A* dout, const A* qkv, const A* out, const float* lse, I B, I T, I C, I NH,
                             AttnDropout drop, float* ws);
  I (*attention_workspace_floats)(I B, I T, I C, I NH, int nthreads);
  void (*classifier_forward_backward)(float* losses, A* dx, float* dwte, const A* x, const A* wte,
                                      const int32_t* targets, I N, I C, I V, float dloss, float* ws);
  I (*classifier_workspace_floats)(I N, I V, int nthreads);
  void (*classifier_logits)(float* logits, const A* x, const A* wte, I N, I C, I V);
  void (*embedding_forward)(A* out, const int32_t* tokens, const A* wte, const A* wpe, I B, I T, I C);
  void (*embedding_backward)(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, I B, I T, I C);
  void (*residual_forward)(A* out, const A* a, const A* b, I n);
  void (*bias_forward)(A* out, const A* bias, I N, I C);
  void (*dropout_forward)(A* out, const A* inp, I n, float p, uint64_t seed, uint64_t stream, uint64_t base);
  void (*dropout_backward)(A* dinp, const A* dout, I n, float p, uint64_t seed, uint64_t stream, uint64_t base);
  // Tensor parallelism over the vocabulary (vocab_parallel.h): the embedding
  // and the cross-entropy of this rank's rows of wte. The three statistics
  // steps are fp32 whatever A is.
  void (*vp_embedding_forward)(A* out, const int32_t* tokens, const A* wte, const A* wpe, I B, I T, I C, I v0, I vn);
  void (*vp_embedding_backward)(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, I B, I T, I C, I v0,
                                I vn);
  void (*xent_vp_local_max)(float* mx, const float* logits, I N, I vn, I valid);
  void (*xent_vp_exp_sums)(float* sums, const float* logits, const float* mx, const int32_t* targets, I N, I vn,
                           I valid, I v0);
  void (*xent_vp_losses)(float* losses, const float* mx, const float* sums, I N);
  void (*xent_vp_grad)(A* dlogits, const float* logits, const float* mx, const float* se, const int32_t* targets, I N,
                       I vn, I valid, I v0, float dloss);
  // Context parallelism (attention.h's block kernels; fp32 activations only: null in a bf16 table).
  void (*attention_block_forward)(float* out, float* lse, const float* q, const float* k, const float* v,
                                  const AttnBlock& blk, AttnDropout drop, float* ws);
  void (*attention_block_backward)(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                   const float* v, const float* out, const float* lse, const AttnBlock& blk,
                                   AttnDropout drop, float* ws);
  I (*attention_block_workspace_floats)(I B, I NH, I Tq, I Tk, I HS, int nthreads);
  // Mixture of experts (moe.h): routing from router logits, token movement by expert.
  void (*moe_route_forward)(float* w, int32_t* ids, float* lse, const A* z, const A* bias, I N, I E, I K, MoeRouting r);
  void (*moe_route_backward)(A* dz, const float* dw, const A* z, const int32_t* ids, const float* lse, const float* aux,
                             float z_scale, I N, I E, I K, MoeRouting r);
  void (*moe_gather)(A* out, const A* in, const int32_t* src, I n, I C);
  void (*moe_combine)(A* out, const A* y, const int32_t* slot, const float* w, I N, I K, I C);
  void (*moe_combine_backward)(A* dy, float* dw, const A* dout, const A* y, const int32_t* slot, const float* w, I N,
                               I K, I C);
  void (*moe_scatter_add)(A* dx, const A* dxp, const int32_t* slot, I N, I K, I C);
  // dst[r * dld + c] = src[r * sld + c] for r < rows, c < width (elements of A; device memory of the table's device).
  void (*copy_rows)(A* dst, I dld, const A* src, I sld, I width, I rows);
  // x[0, n) = value.
  void (*fill)(A* x, I n, float value);
};

// Everything of one device in fp32: the model's kernels and the optimizer's.
struct Ops : ModelOps<float> {
  decltype(&cpu::add_inplace) add_inplace;
  decltype(&cpu::scale_inplace) scale_inplace;
  decltype(&cpu::adamw_runs) adamw_runs;
  decltype(&cpu::sum_squares) sum_squares;
};

// The table for a device; a CUDA device in a CPU-only build gets the stubs,
// which throw CudaError("CUDA was not built") when called.
const Ops& ops_for(Device dev);
// The bf16-activation model kernels (GPU only: ConfigError on the CPU, whose
// bf16 mixed precision is cpu_bf16_product_ops()).
const ModelOps<bfloat16>& bf16_ops_for(Device dev);
// The same with FP8 linear layers (train.fp8_activations=bf16; matmul.h's _fp8b): FP8 tensor cores inside an FP8
// scope under tensorwise scaling, bf16 products elsewhere. GPU only (ConfigError on the CPU).
const ModelOps<bfloat16>& fp8_bf16_ops_for(Device dev);
// bf16 mixed precision on the CPU: the fp32 table with bf16 products in the
// linear layers and the classifier (see cpu/gemm_bf16.h). ConfigError on a
// CPU without bf16 matrix hardware.
const Ops& cpu_bf16_product_ops();
// fp16 mixed precision (train.dtype=fp16): the fp32 ops of `dev` with fp16
// products (each GEMM's operands rounded to binary16, products accumulated in
// fp32) in the linear layers and the classifier; the GPU computes the CPU's.
const Ops& f16_product_ops(Device dev);
// FP8 (train.dtype=fp8): the linear layers' products FP8 (rounded as
// cpu/fp8.h says; the GPU as cuda/lowp.cuh) inside an FP8 scope (fp8.h),
// bf16-rounded outside it and in the classifier.
const Ops& fp8_product_ops(Device dev);

// How many GEMMs FP8 tensor cores ran in this process (kernels::cuda's count; 0 without CUDA).
int64_t fp8_tensor_core_gemms();

// Square sums of runs of one buffer on `dev`: out[i] = ops_for(dev).sum_squares(base + offset[i], count[i]),
// the same bits as one call per run; on the GPU with one readback for all (the norms of split models).
void sum_squares_runs(Device dev, const float* base, const int64_t* offset, const int64_t* count, int64_t n,
                      double* out);

// The numeric detector's statistics (stats.h) on `dev`, `out` on that device too.
void abs_stats(Device dev, AbsStats* out, const float* x, int64_t n);
void abs_stats(Device dev, AbsStats* out, const bfloat16* x, int64_t n);

}  // namespace parallm::kernels
