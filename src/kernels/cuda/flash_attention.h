// Fused (flash-style) causal attention for bf16 activations with 64-wide
// heads, on tensor cores: internal to kernels/cuda, called by attention.cu
// when `flash_attention_applies` says so (otherwise attention.cu keeps its
// GEMM + row-kernel path). Same contract as kernels/attention.h.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/dtype.h"
#include "kernels/attention.h"

namespace parallm::kernels::cuda {

// Head size 64 and every tensor of the call 16-byte aligned (qkv, out; in
// backward also dout and dqkv); attention dropout or none.
bool flash_attention_applies(int64_t C, int64_t NH, std::initializer_list<const void*> ptrs);

// Floats of workspace the backward needs: D = rowsum(dO * O) per (b, h, t).
int64_t flash_attention_workspace_floats(int64_t B, int64_t T, int64_t NH);

void flash_attention_forward(bfloat16* out, float* lse, const bfloat16* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH, const AttnDropout& drop);
void flash_attention_backward(bfloat16* dqkv, const bfloat16* dout, const bfloat16* qkv, const bfloat16* out,
                              const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, const AttnDropout& drop,
                              float* workspace);

}  // namespace parallm::kernels::cuda
