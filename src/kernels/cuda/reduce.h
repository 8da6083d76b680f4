// Deterministic column sums on the GPU: acc[c] += sum over rows of x[r, c],
// in an order fixed by (N, C) alone (row chunks summed in a fixed tree, chunks
// added in order), so two runs give the same bits. No atomics.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels::cuda {
void colsum_accumulate(float* acc, const float* x, int64_t N, int64_t C);
void colsum_accumulate(float* acc, const bfloat16* x, int64_t N, int64_t C);  // fp32 sums of bf16 rows
// Rows per chunk of the first pass and the number of chunks, for sizing partials.
int64_t colsum_chunks(int64_t N);
}  // namespace parallm::kernels::cuda
