// Contract: the statistics of the numeric detector (train.detect_anomaly,
// model/numeric_watch.h): over n values, fp32 or bf16 as the model stores
// them, the smallest nonzero and the largest magnitude of the finite ones and
// how many are +-inf and NaN. Computed where the data lies (the CPU's threads,
// a GPU kernel) and written to `out` there: a GPU caller gathers several
// tensors' statistics in device memory and reads them back with one copy.
// Exact (min, max and counts do not depend on the order of the reduction).
// This header is C++17 (the CUDA kernels include it).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

struct AbsStats {
  float abs_min = 0;  // smallest |x| over the finite nonzero values; +inf when there are none
  float abs_max = 0;  // largest |x| over the finite values; 0 when there are none
  int64_t inf = 0;    // values that are +inf or -inf
  int64_t nan = 0;    // values that are NaN
  bool finite() const { return inf == 0 && nan == 0; }
};

#define PARALLM_STATS_DECLS                                 \
  void abs_stats(AbsStats* out, const float* x, int64_t n); \
  void abs_stats(AbsStats* out, const bfloat16* x, int64_t n);

namespace ref {
PARALLM_STATS_DECLS
}
namespace cpu {
PARALLM_STATS_DECLS
}
// kernels::cuda: x and out on the device, run on gpu::stream() (nothing waits).
namespace cuda {
PARALLM_STATS_DECLS
}
#undef PARALLM_STATS_DECLS
// The implementation of a given device: kernels/ops.h (this header stays C++17 for the CUDA sources).

}  // namespace parallm::kernels
