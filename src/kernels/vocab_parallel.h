// Contract: the vocabulary-parallel embedding and cross-entropy of tensor
// parallelism (Megatron's VocabParallelEmbedding and vocab-parallel loss).
//
// The token table wte [Vp, C] (Vp: the vocabulary padded to a multiple of the
// tp degree) is split by rows; a rank holds rows [v0, v0 + vn) as `wte` [vn, C].
// Of those rows the first `valid` are real tokens (valid < vn only on the rank
// whose rows reach past the real vocabulary V; valid = max(0, min(vn, V - v0))).
//
// Embedding: each rank writes its part of wte[tok] (zero for tokens outside
// its rows), plus wpe[t] where `wpe` is given; the tensor-parallel group sums
// the parts. Exactly one part holds wte[tok] and one holds wpe[t], so the sum
// equals the one-rank embedding bit for bit whatever the order of the sum.
//
// Cross-entropy over logits [N, vn] of this rank's rows (classifier_logits):
// the row maxima and the sums of exponentials are combined over the group in
// three token-sized steps (never vocabulary-sized):
//   1. local_max -> all-reduce(max)       2. exp_sums -> all-reduce(sum) of [se | tgt]
//   3. finish: losses and d(logits).
// Padded columns (j >= valid) take no part: they are skipped by the maxima
// and sums, and their d(logits) is exactly zero, so padded rows of wte never
// receive gradient.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

#define PARALLM_VOCAB_PARALLEL_DECLS(A)                                                                            \
  /* out[b, t] = (v0 <= tok < v0 + vn ? wte[tok - v0] : 0) + (wpe ? wpe[t] : 0) */                                 \
  void vp_embedding_forward(A* out, const int32_t* tokens, const A* wte, const A* wpe, int64_t B, int64_t T,       \
                            int64_t C, int64_t v0, int64_t vn);                                                    \
  /* dwte[tok - v0] += dout[b, t] for this rank's tokens; dwpe[t] += dout[b, t] where dwpe is given. Fixed order   \
     (deterministic for any thread count), like embedding_backward. */                                             \
  void vp_embedding_backward(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int64_t B, int64_t T, \
                             int64_t C, int64_t v0, int64_t vn);                                                   \
  /* dlogits[i, j] = dloss * (exp(logits[i, j] - mx[i]) / se[i] - (j + v0 == targets[i])) for j < valid, 0 for     \
     j >= valid; dlogits may alias logits when A is float. */                                                      \
  void xent_vp_grad(A* dlogits, const float* logits, const float* mx, const float* se, const int32_t* targets,     \
                    int64_t N, int64_t vn, int64_t valid, int64_t v0, float dloss);

#define PARALLM_XENT_VP_DECLS                                                                                     \
  /* mx[i] = max over j < valid of logits[i, j] (-inf when valid == 0) */                                         \
  void xent_vp_local_max(float* mx, const float* logits, int64_t N, int64_t vn, int64_t valid);                   \
  /* sums[i] = sum over j < valid of exp(logits[i, j] - mx[i]); sums[N + i] = logits[i, targets[i] - v0] when the \
     target is among this rank's valid columns, else 0 */                                                         \
  void xent_vp_exp_sums(float* sums, const float* logits, const float* mx, const int32_t* targets, int64_t N,     \
                        int64_t vn, int64_t valid, int64_t v0);                                                   \
  /* losses[i] = log(sums[i]) + mx[i] - sums[N + i] (after step 2's all-reduce) */                                \
  void xent_vp_losses(float* losses, const float* mx, const float* sums, int64_t N);

namespace ref {
PARALLM_VOCAB_PARALLEL_DECLS(float)
PARALLM_XENT_VP_DECLS
}  // namespace ref
namespace cpu {
PARALLM_VOCAB_PARALLEL_DECLS(float)
PARALLM_XENT_VP_DECLS
}  // namespace cpu
// kernels::cuda: the same contract on device pointers, run on gpu::stream();
// bf16 tables and activations with fp32 logits, statistics and gradients.
namespace cuda {
PARALLM_VOCAB_PARALLEL_DECLS(float)
PARALLM_VOCAB_PARALLEL_DECLS(bfloat16)
PARALLM_XENT_VP_DECLS
}  // namespace cuda
#undef PARALLM_VOCAB_PARALLEL_DECLS
#undef PARALLM_XENT_VP_DECLS

}  // namespace parallm::kernels
