// Contract: LayerNorm over the last dimension (eps 1e-5), optional bias.
// Forward saves per-row mean and rstd for backward.
#pragma once
#include <cstdint>

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
}
#undef PARALLM_LAYERNORM_DECLS

}  // namespace parallm::kernels
