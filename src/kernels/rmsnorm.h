// Contract: RMSNorm over the last dimension (Llama's, Qwen's): with
// r = 1 / sqrt(mean(x^2) + eps) computed in fp32, out = weight * (x * r).
// Forward saves r per row for backward. Qwen3's per-head QK-norm is the same
// op over rows of head_dim (N * heads rows, one weight for every head).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

#define PARALLM_RMSNORM_DECLS(T)                                                                                  \
  void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps);      \
  /* dinp += ..., dweight += ... (fp32) */                                                                        \
  void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight, const float* rstd, \
                        int64_t N, int64_t C);

namespace ref {
PARALLM_RMSNORM_DECLS(float)
}
namespace cpu {
PARALLM_RMSNORM_DECLS(float)
}
// kernels::cuda: the same contract on device pointers, run on gpu::stream();
// bf16 activations and weights with fp32 statistics and weight gradients.
namespace cuda {
PARALLM_RMSNORM_DECLS(float)
PARALLM_RMSNORM_DECLS(bfloat16)
}  // namespace cuda
#undef PARALLM_RMSNORM_DECLS

}  // namespace parallm::kernels
