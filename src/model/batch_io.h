// A pass's tokens and targets on their way in and its losses on their way
// out. Both are checked against the vocabulary on the host. On a GPU they are
// uploaded through page-locked staging ([tokens | targets | losses]), so the
// copies queue behind the GPU's work instead of waiting for it to drain; each
// activation set keeps its own device copy (backward's embedding reads the
// tokens again), and the losses come back the same way, at once or deferred.
#pragma once
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/device_array.h"
#include "core/gpu.h"

namespace parallm::model {

class BatchIo {
 public:
  BatchIo() = default;
  // Room for max_tokens positions in each of max_sets activation sets.
  BatchIo(Device dev, int64_t max_tokens, int max_sets);
  BatchIo(BatchIo&&) noexcept = default;
  BatchIo& operator=(BatchIo&&) noexcept = default;
  ~BatchIo();

  // ShapeError naming the position when a token or target (either may be
  // null) of the N is outside [0, V); on a GPU both then point to set `set`'s
  // device copies.
  void begin(int set, const int32_t*& tokens, const int32_t*& targets, int64_t N, int64_t V, const char* where);
  // The tokens `begin` left for set `set` (GPU: its device copy; CPU: null).
  const int32_t* device_tokens(int set) const;
  // The mean of N per-position losses on the model's device; on a GPU with
  // `defer` NaN now, and deferred_loss() reads it later.
  float loss(const float* losses, int64_t N, bool defer);
  // Waits for the last loss copy only, not for later work.
  float deferred_loss();

 private:
  Device dev_ = Device::cpu();
  int64_t max_tokens_ = 0;
  DeviceArray<int32_t> tokens_d_, targets_d_;
  gpu::PinnedBuffer staging_;
  // `uploaded_` guards the staging against an upload still pending, `losses_copied_` the losses.
  std::unique_ptr<gpu::Event> uploaded_, losses_copied_;
  int64_t pending_losses_ = 0;  // positions of a deferred loss not yet read
};

}  // namespace parallm::model
