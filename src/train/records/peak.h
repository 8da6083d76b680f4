// Peak FLOP/s for MFU. CPU: an fp32 GEMM (or with bf16 = true, the bf16
// products of train.dtype=bf16) measured per machine and thread count, cached in $XDG_CACHE_HOME/parallm (or
// ~/.cache/parallm): the best of the first kPeakMeasurements runs' measurements, so one taken while other work
// ran (a peak too low: an MFU above 100%) is replaced by the next runs'. GPU: the datasheet's dense bf16 peak
// (train.peak_flops overrides either).
#pragma once
#include <filesystem>
#include <functional>
#include <string>

namespace parallm::train {

constexpr int kPeakMeasurements = 3;
struct CpuPeak {
  double flops = 0;
  int measurements = 0;  // the runs' measurements it is the best of
};
// The cached best, measured again (about half a second) while fewer than kPeakMeasurements runs measured it.
CpuPeak cpu_gemm_peak(int threads, bool bf16 = false);
double cpu_gemm_peak_flops(int threads, bool bf16 = false);
// The cache's rule (cpu_gemm_peak's, with the cache file and the measurement given): entry `key` of `cache` (a
// JSON object; a missing or damaged file is empty) measured by `measure` while it holds fewer than
// kPeakMeasurements measurements, the best kept and written back (best effort).
CpuPeak cached_best_peak(const std::filesystem::path& cache, const std::string& key,
                         const std::function<double()>& measure);
// Measures without the cache.
double measure_gemm_flops(int threads, double seconds = 0.4, bool bf16 = false);
// A GPU's dense bf16 tensor-core peak from its datasheet, by compute
// capability and SM count (H100 SXM: 989 TFLOP/s at 132 SMs; A100: 312 at 108),
// the denominator MFU is quoted against by nanoGPT and llm.c.
double gpu_peak_flops(int device);

}  // namespace parallm::train
