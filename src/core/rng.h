// Counter-based random numbers (Philox4x32-10). A value depends only on
// (seed, stream, index), never on call order or thread count: this is what
// lets a resumed run, or any parallel layout, reproduce the single-process
// run bit for bit. Streams separate uses (init of each parameter, dropout of
// each layer and step, data sampling) so they never overlap.
#pragma once
#include <array>
#include <cstdint>

#include "core/philox.h"  // philox4x32_into, u32_to_unit

namespace parallm {

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index);

// Deterministic stream ids from a few small integers, e.g. stream_id(kDropout, step, layer, site).
uint64_t stream_id(uint32_t kind, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0);

enum RngKind : uint32_t { kRngInit = 1, kRngDropout = 2, kRngData = 3, kRngSample = 4, kRngTest = 5 };

// out[i] ~ N(mean, std), element i drawn from (seed, stream, i): thread-count independent.
void fill_normal(float* out, int64_t n, float mean, float std, uint64_t seed, uint64_t stream);
// out[i] ~ U[lo, hi)
void fill_uniform(float* out, int64_t n, float lo, float hi, uint64_t seed, uint64_t stream);
// Uniform integer in [0, n) for index i (n > 0), via 64 random bits (negligible bias).
uint64_t random_below(uint64_t n, uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace parallm
