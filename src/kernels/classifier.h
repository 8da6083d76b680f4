// Contract: the language-model head fused with softmax and cross-entropy.
// logits = x[N, C] @ wte[V, C]^T, loss_i = logsumexp(logits_i) - logits_i[target_i].
// The fused op processes rows in chunks: for each chunk it computes the logits,
// the per-row loss and, when gradients are wanted, d(logits) in place, then
// folds them into dx and dwte right away. The full [N, V] logits never exist.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

#define PARALLM_CLASSIFIER_DECLS                                                                            \
  /* losses[N] = per-row loss. If dx != null: dx (overwritten) and dwte (+=) get the gradient of            \
     sum_i dloss * losses[i]. */                                                                            \
  void classifier_forward_backward(float* losses, float* dx, float* dwte, const float* x, const float* wte, \
                                   const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,    \
                                   float* workspace);                                                       \
  int64_t classifier_workspace_floats(int64_t N, int64_t V, int nthreads);                                  \
  /* logits[N, V] for sampling and tests */                                                                 \
  void classifier_logits(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V);

namespace ref {
PARALLM_CLASSIFIER_DECLS
}
namespace cpu {
PARALLM_CLASSIFIER_DECLS
// The same with bf16 products (fp32 in and out; see cpu/gemm_bf16.h).
void classifier_forward_backward_bf16p(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                       const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                       float* workspace);
void classifier_logits_bf16p(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V);
// And with fp16 products (emulated, cpu/f16.h).
void classifier_forward_backward_f16p(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                      const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                      float* workspace);
void classifier_logits_f16p(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V);
// And with bf16-rounded products (emulated as fp16's: the FP8 policy's head, cpu/fp8.h).
void classifier_forward_backward_bf16r(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                       const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                       float* workspace);
void classifier_logits_bf16r(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V);
}  // namespace cpu
// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
PARALLM_CLASSIFIER_DECLS
// bf16 x and wte; each chunk's logits and d(logits) in bf16 (as autocast),
// softmax and losses in fp32; dwte accumulates in fp32.
void classifier_forward_backward(float* losses, bfloat16* dx, float* dwte, const bfloat16* x, const bfloat16* wte,
                                 const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                 float* workspace);
int64_t classifier_workspace_floats_bf16(int64_t N, int64_t V, int nthreads);
void classifier_logits(float* logits, const bfloat16* x, const bfloat16* wte, int64_t N, int64_t C, int64_t V);
// fp32 activations with fp16 or bf16-rounded products, as the CPU's _f16p and _bf16r (cuda/lowp.cuh; the fp32
// workspace).
void classifier_forward_backward_f16p(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                      const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                      float* workspace);
void classifier_logits_f16p(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V);
void classifier_forward_backward_bf16r(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                       const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                       float* workspace);
void classifier_logits_bf16r(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V);
}  // namespace cuda
#undef PARALLM_CLASSIFIER_DECLS

}  // namespace parallm::kernels
