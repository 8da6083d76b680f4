// Causal attention through cuDNN's fused flash attention (its graph API; see
// cudnn_attention.cpp), for bf16 activations without attention dropout.
// Internal to kernels/cuda: attention.cu calls it first where it applies and
// falls back to parallm's own flash kernels when it returns false (cuDNN not
// built, AttentionImpl::Own, or no cuDNN engine for the shape). Same
// contract as kernels/attention.h: lse is the natural-log log-sum-exp of the
// scaled scores, so either implementation's forward feeds either backward.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels::cuda {

// workspace: the caller's attention workspace of workspace_floats floats,
// used where cuDNN's plan fits in it (else cuDNN gets a buffer of its own).
bool cudnn_attention_forward(bfloat16* out, float* lse, const bfloat16* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH, float* workspace, int64_t workspace_floats);
bool cudnn_attention_backward(bfloat16* dqkv, const bfloat16* dout, const bfloat16* qkv, const bfloat16* out,
                              const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, bool repeatable,
                              float* workspace, int64_t workspace_floats);
// What the repeatable backward asks of the workspace (0 without cuDNN).
int64_t cudnn_attention_workspace_floats(int64_t B, int64_t T, int64_t C, int64_t NH);

}  // namespace parallm::kernels::cuda
