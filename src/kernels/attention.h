// Contract: fused causal multi-head self-attention.
// qkv [B, T, 3C] holds q | k | v (each [B, T, NH, HS], C = NH*HS), as c_attn emits it.
// Forward writes out [B, T, C] and the per-row log-sum-exp lse [B, NH, T] of the
// scaled scores; that is all backward needs (it recomputes the probabilities),
// so no T x T matrix is kept between forward and backward.
// Attention dropout (p > 0) drops probabilities with a mask drawn from the
// counter-based RNG at (seed, stream, index of (b, h, i, j)), regenerated in backward.
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

}  // namespace parallm::kernels
