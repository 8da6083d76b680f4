// fp16 products on the CPU, for `train.dtype=fp16` there (emulated: the CPUs
// here have no fp16 matrix units): a GEMM's operands are rounded to IEEE
// binary16 (nearest even; beyond 65504 to infinity, below 2^-14 to its
// subnormals, which is what loss scaling is for), kept as fp32 values, and
// multiplied by the fp32 GEMM. The product of two binary16 values is exact
// in fp32, so this is the fp16 GEMM with fp32 accumulation that tensor cores
// run, up to the order of the sums. Activations stay fp32, as with bf16
// products (gemm_bf16.h).
#pragma once
#include <cstdint>

namespace parallm::kernels::cpu {

// dst[i] = binary16(src[i]) as a float, i < n (dst == src allowed). F16C where
// the CPU has it, else the same rounding in software.
void round_to_f16(float* dst, const float* src, int64_t n);
// The same for a rows x cols block of src with row stride ld, into dense dst.
void round_to_f16(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld);
// Scratch slot `slot` (0-3) of at least n floats, grown on demand and kept
// (accounted as scratch; the model's thread only): the operands of every emulated
// product (fp16 here, bf16-rounded and FP8 in fp8.h).
float* lowp_scratch(int slot, int64_t n);

}  // namespace parallm::kernels::cpu
