// Contract: GELU, exact (erf, nanoGPT's nn.GELU()) or tanh approximation (GPT-2/llm.c).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

enum class GeluKind { Exact, Tanh };

namespace ref {
void gelu_forward(float* out, const float* inp, int64_t n, GeluKind kind);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluKind kind);  // overwrites dinp
}  // namespace ref
namespace cpu {
void gelu_forward(float* out, const float* inp, int64_t n, GeluKind kind);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluKind kind);
}  // namespace cpu
// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
void gelu_forward(float* out, const float* inp, int64_t n, GeluKind kind);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluKind kind);
void gelu_forward(bfloat16* out, const bfloat16* inp, int64_t n, GeluKind kind);
void gelu_backward(bfloat16* dinp, const bfloat16* inp, const bfloat16* dout, int64_t n, GeluKind kind);
}  // namespace cuda

}  // namespace parallm::kernels
