// FP8 products on the CPU, for `train.dtype=fp8` there (emulated: the CPUs
// here have no FP8 units). Each operand's rows are scaled by a power of two,
// 2^e with e the least for which the row's absolute maximum fits the format's
// largest value (so the scaling itself is exact), rounded to the format
// (nearest even, with its subnormals; saturating at the largest value), scaled
// back and multiplied by the fp32 GEMM: the product of two FP8 values is exact
// in fp32, so this is a scaled FP8 GEMM with fp32 accumulation up to the order
// of its sums. E4M3 (3 mantissa bits, largest 448) for activations and
// weights, E5M2 (2 bits, largest 57344) for output gradients. Outside an FP8
// scope (kernels/fp8.h) the same functions round the operands to bf16.
#pragma once
#include <cstdint>

#include "kernels/fp8.h"

namespace parallm::kernels::cpu {

using kernels::Fp8Format;  // kernels/fp8.h

float fp8_max(Fp8Format f);
// x rounded to the format (|x| at most fp8_max: what the row scaling ensures; beyond it saturates).
float round_fp8(float x, Fp8Format f);
// dst[i] = bf16(src[i]) as a float (nearest even), i < n; dst == src allowed.
void round_to_bf16_values(float* dst, const float* src, int64_t n);
// The rows x cols block src (row stride cols) scaled per row, rounded to the format and scaled back into dst.
// Each row's absolute maximum is first reduced by `reduce` (the other parts of a split row); amax is scratch of
// `rows` floats. A row of zeros stays zero; a row holding inf or NaN is copied as it is (the step's overflow
// check sees it). Under a tensorwise context (kernels/fp8.h) the block has one scale instead: the largest row
// maximum, reduced by the context's reduction (`reduce` unused); a block holding inf or NaN is copied as it is.
void fp8_rows(float* dst, const float* src, int64_t rows, int64_t cols, Fp8Format f, const Fp8RowMax& reduce,
              float* amax);

}  // namespace parallm::kernels::cpu
