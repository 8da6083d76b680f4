// Peak FLOP/s for MFU. CPU: an fp32 GEMM (or with bf16 = true, the bf16
// products of train.dtype=bf16) measured once per machine and thread count, cached in $XDG_CACHE_HOME/parallm (or
// ~/.cache/parallm). GPU: the datasheet's dense bf16 peak (train.peak_flops overrides either).
#pragma once

namespace parallm::train {

// Returns the cached value, or measures it (about half a second) and caches it.
double cpu_gemm_peak_flops(int threads, bool bf16 = false);
// Measures without the cache.
double measure_gemm_flops(int threads, double seconds = 0.4, bool bf16 = false);
// A GPU's dense bf16 tensor-core peak from its datasheet, by compute
// capability and SM count (H100 SXM: 989 TFLOP/s at 132 SMs; A100: 312 at 108),
// the denominator MFU is quoted against by nanoGPT and llm.c.
double gpu_peak_flops(int device);

}  // namespace parallm::train
