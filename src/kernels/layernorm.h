// Contract: LayerNorm over the last dimension (eps 1e-5), optional bias.
// Forward saves per-row mean and rstd for backward.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

constexpr float kLayerNormEps = 1e-5f;

#define PARALLM_LAYERNORM_DECLS                                                                           \
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,     \
                         const float* bias, int64_t N, int64_t C);                                        \
  /* dinp += ..., dweight += ..., dbias += ... (dbias may be null) */                                     \
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, \
                          const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

namespace ref {
PARALLM_LAYERNORM_DECLS
}
namespace cpu {
PARALLM_LAYERNORM_DECLS
}
// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
PARALLM_LAYERNORM_DECLS
// bf16 activations and weights; statistics and dweight/dbias in fp32.
void layernorm_forward(bfloat16* out, float* mean, float* rstd, const bfloat16* inp, const bfloat16* weight,
                       const bfloat16* bias, int64_t N, int64_t C);
void layernorm_backward(bfloat16* dinp, float* dweight, float* dbias, const bfloat16* dout, const bfloat16* inp,
                        const bfloat16* weight, const float* mean, const float* rstd, int64_t N, int64_t C);
}  // namespace cuda
#undef PARALLM_LAYERNORM_DECLS

}  // namespace parallm::kernels
