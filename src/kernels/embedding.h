// Contract: token + position embedding. out[b, t, :] = wte[tok[b, t], :] + wpe[t, :]
// (wpe and dwpe null: no position table, out = wte[tok], as rotary models have).
// Backward accumulates into dwte/dwpe in a fixed order (no atomics), so it is
// deterministic for any thread count.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

#define PARALLM_EMBEDDING_DECLS                                                                                       \
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T, \
                         int64_t C);                                                                                  \
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,   \
                          int64_t C);

namespace ref {
PARALLM_EMBEDDING_DECLS
}
namespace cpu {
PARALLM_EMBEDDING_DECLS
}
// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
PARALLM_EMBEDDING_DECLS
// bf16 tables and activations; dwte and dwpe accumulate in fp32.
void embedding_forward(bfloat16* out, const int32_t* tokens, const bfloat16* wte, const bfloat16* wpe, int64_t B,
                       int64_t T, int64_t C);
void embedding_backward(float* dwte, float* dwpe, const bfloat16* dout, const int32_t* tokens, int64_t B, int64_t T,
                        int64_t C);
}  // namespace cuda
#undef PARALLM_EMBEDDING_DECLS

}  // namespace parallm::kernels
