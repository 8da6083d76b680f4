// Contract: a mixture-of-experts layer's routing and token movement.
//
// Routing (fp32 arithmetic whatever the logits' type), per token t of N with
// router logits z[t, 0..E):
//   score  = softmax(z) (MoeScore::Softmax) or sigmoid(z) (Sigmoid)
//   choose the K experts of largest score + bias (bias: nullable [E], DeepSeek's
//   aux-loss-free correction), in descending order, ties to the lower index
//   w      = score[chosen]; normalized to sum 1 (norm); times `scale`
//   lse[t] = logsumexp(z[t]) (the router z-loss's term)
// Backward overwrites dz from dw (the weights' gradient) plus two optional
// terms: the auxiliary load-balancing loss's gradient with respect to each
// token's balancing probabilities P[t] (`aux`: [E], the same for every token;
// null: none; P = softmax(z), or score / sum(score) for sigmoid scores) and
// the z-loss's (`z_scale` * 2 * lse[t] * softmax(z[t]); 0: none).
//
// Token movement over a permutation of the N x K (token, choice) pairs into
// expert order: slot[t * K + j] is the permuted row of token t's choice j
// (-1: dropped, it contributes nothing), src[i] the token of permuted row i.
//   gather:   out[i] = in[src[i]]                                 (rows of C)
//   combine:  out[t] = sum_j w[t, j] y[slot[t, j]]  (j in order)  (overwrites)
//   combine_backward: dy[slot[t, j]] = w[t, j] dout[t]; dw[t, j] = dout[t] . y[slot[t, j]]
//   scatter_add: dx[t] = sum_j dxp[slot[t, j]]       (j in order)  (overwrites)
// Each output row is written by one thread with a fixed order of sums, so the
// results do not depend on the thread count (the reference's bits).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

enum class MoeScore { Softmax, Sigmoid };

struct MoeRouting {
  MoeScore score = MoeScore::Softmax;
  bool norm = true;
  float scale = 1.0f;
};

#define PARALLM_MOE_ROUTE_DECLS(T)                                                                                    \
  void moe_route_forward(float* w, int32_t* ids, float* lse, const T* z, const T* bias, int64_t N, int64_t E,         \
                         int64_t K, MoeRouting r);                                                                    \
  void moe_route_backward(T* dz, const float* dw, const T* z, const int32_t* ids, const float* lse, const float* aux, \
                          float z_scale, int64_t N, int64_t E, int64_t K, MoeRouting r);
#define PARALLM_MOE_ROWS_DECLS(T)                                                                             \
  void moe_gather(T* out, const T* in, const int32_t* src, int64_t n, int64_t C);                             \
  void moe_combine(T* out, const T* y, const int32_t* slot, const float* w, int64_t N, int64_t K, int64_t C); \
  void moe_combine_backward(T* dy, float* dw, const T* dout, const T* y, const int32_t* slot, const float* w, \
                            int64_t N, int64_t K, int64_t C);                                                 \
  void moe_scatter_add(T* dx, const T* dxp, const int32_t* slot, int64_t N, int64_t K, int64_t C);

namespace ref {
PARALLM_MOE_ROUTE_DECLS(float)
PARALLM_MOE_ROWS_DECLS(float)
}  // namespace ref
namespace cpu {
PARALLM_MOE_ROUTE_DECLS(float)
PARALLM_MOE_ROWS_DECLS(float)
}  // namespace cpu
namespace cuda {
PARALLM_MOE_ROUTE_DECLS(float)
PARALLM_MOE_ROUTE_DECLS(bfloat16)
PARALLM_MOE_ROWS_DECLS(float)
PARALLM_MOE_ROWS_DECLS(bfloat16)
}  // namespace cuda
#undef PARALLM_MOE_ROUTE_DECLS
#undef PARALLM_MOE_ROWS_DECLS

}  // namespace parallm::kernels
