// Contract: rotary position embedding (Hugging Face's rotate-half layout)
// fused with grouped-query attention's packing into the attention kernel's
// input.
//
// q [N, H*D], k and v [N, KV*D] (N = B*T rows, row b*T + t; H a multiple of
// KV) become qkv [N, 3*H*D] = q | k | v with H heads each, as attention.h
// reads it: q head h rotated; k head h the rotated k head h / (H/KV); v head
// h the v head h / (H/KV) (each KV head serves H/KV query heads). Rotation of
// a head x at table row t, for i < D/2:
//   x'[i]       = x[i] cos[t][i] - x[i + D/2] sin[t][i]
//   x'[i + D/2] = x[i + D/2] cos[t][i] + x[i] sin[t][i]
// where `rope` [T, D] holds each row's cos[0, D/2) then sin[0, D/2) (fp32,
// computed once on the host for the rows' positions: model/rope.h); rope
// null means no rotation (a plain pack).
//
// Backward overwrites dq, dk, dv from dqkv: dq the transposed rotation of the
// q part, dk head j the sum over its H/KV query heads of the transposed
// rotation of their k parts (in head order), dv likewise unrotated.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

#define PARALLM_ROPE_DECLS(E)                                                                                     \
  void rope_pack_forward(E* qkv, const E* q, const E* k, const E* v, const float* rope, int64_t B, int64_t T,     \
                         int64_t H, int64_t KV, int64_t D);                                                       \
  void rope_pack_backward(E* dq, E* dk, E* dv, const E* dqkv, const float* rope, int64_t B, int64_t T, int64_t H, \
                          int64_t KV, int64_t D);

namespace ref {
PARALLM_ROPE_DECLS(float)
}
namespace cpu {
PARALLM_ROPE_DECLS(float)
}
namespace cuda {
PARALLM_ROPE_DECLS(float)
PARALLM_ROPE_DECLS(bfloat16)
}  // namespace cuda
#undef PARALLM_ROPE_DECLS

}  // namespace parallm::kernels
