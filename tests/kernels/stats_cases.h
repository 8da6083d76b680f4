// Inputs for the numeric detector's statistics (kernels/stats.h), shared by
// the CPU and CUDA tests: odd sizes around the CPU's chunk (16384) and the
// GPU's grid, magnitudes from 1e-30 to 1e30, zeros, and +-inf and NaN at
// scattered places (or none).
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/stats.h"

namespace parallm::test {

struct StatsCase {
  std::vector<float> x;
  int64_t inf = 0, nan = 0;  // as planted
};

inline std::vector<StatsCase> stats_cases() {
  std::vector<StatsCase> out;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  int seed = 1;
  for (int64_t n : {0, 1, 7, 255, 16383, 16384, 16385, 100003, (1 << 20) + 5}) {
    for (int faults : {0, 1, 3}) {
      StatsCase c;
      c.x = randv(n, static_cast<uint64_t>(seed++));
      for (int64_t i = 0; i < n; ++i) c.x[i] *= std::pow(10.0f, static_cast<float>((i * 7919) % 61 - 30));
      for (int64_t i = 0; i < n; i += 97) c.x[i] = 0.0f;
      for (int k = 0; k < faults && n > 0; ++k) {
        const int64_t at = (n - 1) * (2 * k + 1) / (2 * faults);  // spread over the range
        if (!std::isfinite(c.x[at])) continue;
        if (k == 1) {
          c.x[at] = nan;
          ++c.nan;
        } else {
          c.x[at] = k == 0 ? inf : -inf;
          ++c.inf;
        }
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace parallm::test
