// Contract: fused causal multi-head self-attention.
// qkv [B, T, 3C] holds q | k | v (each [B, T, NH, HS], C = NH*HS), as c_attn emits it.
// Forward writes out [B, T, C] and the per-row log-sum-exp lse [B, NH, T] of the
// scaled scores; that is all backward needs (it recomputes the probabilities),
// so no T x T matrix is kept between forward and backward.
// Attention dropout (p > 0) drops probabilities with a mask drawn from the
// counter-based RNG at (seed, stream, index of (b, h, i, j)), regenerated in backward.
// The block kernels (AttnBlock, below) run one such problem in pieces, queries
// of some rows against keys of others, merging per-row (out, lse) pairs: the
// context-parallel (ring attention) form, with the same dropout masks.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

struct AttnDropout {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t stream = 0;
  int64_t bh_base = 0;    // global (b, h) index of this call's first sample and head (data parallel slices)
  int64_t bh_stride = 0;  // heads per sample in that index (0: the call's NH; tensor parallelism: all heads)
  // The mask's (sample, head) index of the call's sample b and head h, so a
  // rank holding some samples or some heads draws the one-rank masks.
  int64_t global_bh(int64_t b, int64_t h, int64_t NH) const { return bh_base + b * (bh_stride ? bh_stride : NH) + h; }
};

#define PARALLM_ATTENTION_DECLS                                                                                 \
  void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH, \
                         AttnDropout drop, float* workspace);                                                   \
  /* dqkv is overwritten */                                                                                     \
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, \
                          int64_t B, int64_t T, int64_t C, int64_t NH, AttnDropout drop, float* workspace);     \
  int64_t attention_workspace_floats(int64_t B, int64_t T, int64_t C, int64_t NH, int nthreads);

namespace ref {
PARALLM_ATTENTION_DECLS
}
namespace cpu {
PARALLM_ATTENTION_DECLS
}
// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
PARALLM_ATTENTION_DECLS
// bf16 q, k, v and output; scores, lse and softmax in fp32.
void attention_forward(bfloat16* out, float* lse, const bfloat16* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       AttnDropout drop, float* workspace);
void attention_backward(bfloat16* dqkv, const bfloat16* dout, const bfloat16* qkv, const bfloat16* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, AttnDropout drop,
                        float* workspace);
int64_t attention_workspace_floats_bf16(int64_t B, int64_t T, int64_t C, int64_t NH, int nthreads);
// Which fused kernels bf16 attention without dropout takes: cuDNN's flash
// attention (the default where parallm was built with cuDNN and cuDNN has an
// engine for the shape) with its bitwise-repeatable backward, or CudnnFast:
// the same with cuDNN's faster backward, which sums dQ in a varying order, or
// Own: parallm's kernels (repeatable). PARALLM_ATTENTION=cudnn|cudnn-fast|own
// in the environment sets the process's starting choice.
enum class AttentionImpl { Cudnn, CudnnFast, Own };
AttentionImpl set_attention_impl(AttentionImpl impl);  // returns the previous choice
AttentionImpl attention_impl();
// Whether parallm was built with cuDNN, and the attention calls cuDNN has
// served so far (the rest ran parallm's kernels).
bool cudnn_attention_built();
int64_t cudnn_attention_calls();
}  // namespace cuda
#undef PARALLM_ATTENTION_DECLS

// Context parallelism (issue 36): the queries of some rows against the keys
// and values of some rows of one causal attention problem, positions global.
// Head h of row i of sample b of a tensor X lies at X + b*X_bs + i*X_ld + h*HS.
// Key row j is visible to query row i iff k0 + j <= q0 + i (causal), so a
// block entirely before the queries is full, one at the same positions is the
// causal diagonal, one after them is empty (nothing done).
struct AttnBlock {
  int64_t B = 0, NH = 0, HS = 0;
  int64_t Tq = 0, Tk = 0;        // query rows, key rows in this block
  int64_t q0 = 0, k0 = 0;        // global positions of the first query row and the first key row
  int64_t T = 0;                 // global sequence length (the dropout mask's index)
  int64_t q_ld = 0, q_bs = 0;    // q (and dq): row and sample strides, in elements
  int64_t kv_ld = 0, kv_bs = 0;  // k, v (and dk, dv)
  int64_t o_ld = 0, o_bs = 0;    // out (and dout)
  int64_t lse_ld = 0;            // lse of (b, h, i) at lse[(b*NH + h)*lse_ld + i]
  bool first = false;            // forward: the rows' first block (write out and lse instead of merging)
};
// ShapeError naming `where` unless the block's sizes are valid and its query
// and key rows lie inside the sequence of blk.T (every backend checks this first).
void check_attn_block(const AttnBlock& blk, const char* where);

// The block kernels, fp32 only. The dropout mask of query row i, key row j of
// (b, h) is the unsplit kernels' one at global (q0 + i, k0 + j) of length T.
//
// attention_block_forward merges this block into the running (out, lse) of
// its query rows: with the block's own log-sum-exp l_b (of the scaled scores
// q.k/sqrt(HS) over the visible keys, before dropout) and output
// o_b = sum_j softmax_j * mask_j/(1-p) * v_j,
//   lse' = log(exp(lse) + exp(l_b)),  out' = exp(lse - lse') out + exp(l_b - lse') o_b
// (stable form: max + log1p(exp(-|a-b|))). A row with no visible key in the
// block is left alone; a row whose running lse is -inf takes the block's
// values. With blk.first the block's values are written (a row with no
// visible key then gets out = 0, lse = -inf).
//
// attention_block_backward accumulates (+=) this block's part of dq, dk, dv,
// given dout and the MERGED out and lse of the query rows (the global ones
// over all keys): P = exp(s - lse), D = rowsum(dout * out),
// dS = P * (dP' * mask/(1-p) - D) * scale with dP' = dout . v, dq += dS k,
// dk += dS^T q, dv += (P * mask/(1-p))^T dout. dq has q's strides, dk and dv
// kv's, dout out's.
#define PARALLM_ATTENTION_BLOCK_DECLS                                                                               \
  void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,              \
                               const AttnBlock& blk, AttnDropout drop, float* workspace);                           \
  void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, \
                                const float* v, const float* out, const float* lse, const AttnBlock& blk,           \
                                AttnDropout drop, float* workspace);                                                \
  int64_t attention_block_workspace_floats(int64_t B, int64_t NH, int64_t Tq, int64_t Tk, int64_t HS, int nthreads);

namespace cpu {
PARALLM_ATTENTION_BLOCK_DECLS
}
// kernels::cuda: device pointers, run on gpu::stream().
namespace cuda {
PARALLM_ATTENTION_BLOCK_DECLS
}
#undef PARALLM_ATTENTION_BLOCK_DECLS

}  // namespace parallm::kernels
