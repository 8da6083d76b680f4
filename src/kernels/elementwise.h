// Contract: residual add, dropout, strided row copies and fills. Dropout's
// mask is drawn from the counter-based RNG at (seed, stream, element index)
// and regenerated in backward, so nothing is stored and any thread count gives
// the same mask.
// `base` is the global index of element 0: a rank holding samples [s, s+B)
// of a step passes s*T*C, so every layout draws the same mask per sample.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

#define PARALLM_ELEMENTWISE_DECLS                                                                           \
  void residual_forward(float* out, const float* a, const float* b, int64_t n); /* out = a + b */           \
  void add_inplace(float* acc, const float* x, int64_t n);                      /* acc += x */              \
  void scale_inplace(float* x, int64_t n, float s);                             /* x *= s */                \
  void bias_forward(float* out, const float* bias, int64_t N, int64_t C);       /* out[i, :] += bias */     \
  void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t stream,    \
                       uint64_t base);                                                                      \
  void dropout_backward(float* dinp, const float* dout, int64_t n, float p, uint64_t seed, uint64_t stream, \
                        uint64_t base);

namespace ref {
PARALLM_ELEMENTWISE_DECLS
}
namespace cpu {
PARALLM_ELEMENTWISE_DECLS
}
// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
PARALLM_ELEMENTWISE_DECLS
// bf16 variants (fp32 arithmetic inside), and conversions (round to nearest even).
void residual_forward(bfloat16* out, const bfloat16* a, const bfloat16* b, int64_t n);
void bias_forward(bfloat16* out, const bfloat16* bias, int64_t N, int64_t C);
void dropout_forward(bfloat16* out, const bfloat16* inp, int64_t n, float p, uint64_t seed, uint64_t stream,
                     uint64_t base);
void dropout_backward(bfloat16* dinp, const bfloat16* dout, int64_t n, float p, uint64_t seed, uint64_t stream,
                      uint64_t base);
void convert(bfloat16* out, const float* in, int64_t n);
void convert(float* out, const bfloat16* in, int64_t n);
}  // namespace cuda
#undef PARALLM_ELEMENTWISE_DECLS

// Strided copies and fills, for float and bf16 elements (context parallelism's
// staging of q, k, v rows and its running out and lse):
//   copy_rows: dst[r * dld + c] = src[r * sld + c] for r < rows, c < width;
//   fill:      x[0, n) = value (rounded to bf16 for bf16 elements).
#define PARALLM_COPY_FILL_DECLS(E)                                                             \
  void copy_rows(E* dst, int64_t dld, const E* src, int64_t sld, int64_t width, int64_t rows); \
  void fill(E* x, int64_t n, float value);
namespace cpu {
PARALLM_COPY_FILL_DECLS(float)
PARALLM_COPY_FILL_DECLS(bfloat16)
}  // namespace cpu
// kernels::cuda: device pointers, on gpu::stream().
namespace cuda {
PARALLM_COPY_FILL_DECLS(float)
PARALLM_COPY_FILL_DECLS(bfloat16)
}  // namespace cuda
#undef PARALLM_COPY_FILL_DECLS

// Keep probability for element `index`: true when the element survives.
bool dropout_keep(float p, uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace parallm::kernels
