// Contract: GELU, exact (erf, nanoGPT's nn.GELU()) or tanh approximation (GPT-2/llm.c).
// Accuracy of the exact kind in fp32: the CPU kernel computes Phi(x) = (1 +
// erf(x / sqrt 2)) / 2 from a rational erf, so GELU is within 3e-7 * max(1,
// |x|) and cancels in the left tail as fp32 PyTorch does (within 1e-4
// relative only for x > -2.97, and 0 for x < -5.66); the GPU's fp32 kernel
// goes through erfc and keeps relative precision there. NaN in, NaN out.
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
