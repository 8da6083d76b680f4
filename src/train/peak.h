// Peak FLOP/s for MFU on CPU: an fp32 GEMM measured once per machine and
// thread count, cached in $XDG_CACHE_HOME/parallm (or ~/.cache/parallm).
#pragma once

namespace parallm::train {

// Returns the cached value, or measures it (about half a second) and caches it.
double cpu_gemm_peak_flops(int threads);
// Measures without the cache.
double measure_gemm_flops(int threads, double seconds = 0.4);

}  // namespace parallm::train
