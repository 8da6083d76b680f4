// Rotary position embeddings' frequencies and tables (Hugging Face's
// rotate-half form; kernels/rope.h applies them). The book's inv_freq lesson:
// frequencies computed on different devices in different precisions give
// different logits, so parallm computes them once, on the host, the way
// Hugging Face's fp32 code does (inv_freq = 1 / theta^(2i/D) in fp32, Llama
// 3's scaling on those fp32 values, angle = fp32 position x inv_freq), takes
// each cos and sin of the fp32 angle correctly rounded, and uploads the table:
// every device and every layout reads the same bits.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/device_array.h"
#include "model/config.h"
#include "model/cp_layout.h"

namespace parallm::model {

// inv_freq [D/2] of the config (rope_theta, head size, rope_scaling).
std::vector<float> rope_inv_freq(const GPTConfig& cfg);
// Rows [n, D] for positions pos[0, n): cos of each angle in [0, D/2), sin in [D/2, D).
void rope_rows(float* out, const std::vector<float>& inv_freq, const int64_t* pos, int64_t n);

// The table a model's passes read: the rows of the local positions of a pass
// (start..start+T-1, or context parallel the runs' global positions), on the
// model's device, rebuilt only when the positions change (a small key
// compared per pass; no upload on the steady path).
class RopeTable {
 public:
  RopeTable() = default;
  // Room for max_rows positions at once, allocated now: the table never moves (a CUDA graph keeps its address).
  RopeTable(const GPTConfig& cfg, Device dev, int64_t max_rows);
  bool active() const { return !inv_.empty(); }
  // The table of a pass of T local rows starting at position `start` (runs
  // empty), or of the local rows of a context-parallel pass (runs, Tg).
  const float* rows(int64_t T, int64_t start, const CpRuns& runs);

 private:
  std::vector<float> inv_;
  Device dev_;
  DeviceArray<float> table_;
  using Key = std::array<int64_t, 9>;
  Key key_{};  // the positions the table holds: (T, start) or the runs
};

}  // namespace parallm::model
