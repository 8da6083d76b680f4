// Row pieces shared by the CPU attention kernels (attention.cpp, unsplit, and
// attention_block.cpp, context parallelism's blocks): the query-block size,
// the scratch row stride, and the per-row softmax, dropout and dS steps.
#pragma once
#include <cstdint>

#include "kernels/attention.h"

namespace parallm::kernels::cpu::attn {

constexpr int64_t kBr = 32;  // query rows per block (smaller blocks waste less on the causal diagonal)

// Row stride of scratch tiles of n keys: n rounded up to 16 floats plus 16,
// so that successive rows do not fall on the same L1 sets (a 1 KiB stride at
// T=256 made the K^T stream in S = Q K^T thrash the cache).
int64_t scratch_ld(int64_t n);

// row[j] = src[j] * mask/(1-p) for j < len, the mask's element j at index0 + j
// (index0: the dropout index of the row's key 0, (bh*T + i)*T for the unsplit kernels).
void dropout_row(float* row, const float* src, int64_t len, uint64_t index0, const AttnDropout& d);

// Scores -> probabilities over s[0..len), zeros in [len, n); returns log-sum-exp (len > 0).
float softmax_row(float* s, int64_t len, int64_t n);

// Scores -> exp(s - lse) over s[0..len), zeros in [len, n).
void probs_row(float* s, int64_t len, int64_t n, float lse);

// dS = P * (dP - D) * scale, in place over dp.
void dscores_row(float* dp, const float* p, int64_t n, float D, float scale);

float dot(const float* a, const float* b, int64_t n);

}  // namespace parallm::kernels::cpu::attn
