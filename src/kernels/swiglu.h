// Contract: SwiGLU's gate, elementwise: out = silu(gate) * up with
// silu(g) = g / (1 + exp(-g)) (Llama's MLP: down(silu(gate(x)) * up(x))).
// Backward overwrites dgate and dup: dgate = dout * up * s (1 + g (1 - s)),
// dup = dout * silu(g), s = sigmoid(g). fp32 arithmetic for every type.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

#define PARALLM_SWIGLU_DECLS(T)                                       \
  void swiglu_forward(T* out, const T* gate, const T* up, int64_t n); \
  void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

namespace ref {
PARALLM_SWIGLU_DECLS(float)
}
namespace cpu {
PARALLM_SWIGLU_DECLS(float)
}
namespace cuda {
PARALLM_SWIGLU_DECLS(float)
PARALLM_SWIGLU_DECLS(bfloat16)
}  // namespace cuda
#undef PARALLM_SWIGLU_DECLS

}  // namespace parallm::kernels
