// The numeric detector (train.detect_anomaly): the underflow/overflow
// detector of Stas Bekman's ML Engineering book (DebugUnderflowOverflow in
// Hugging Face transformers). After each layer's forward and backward the
// model hands the watch that layer's tensors (its weights and outputs going
// forward; the gradient leaving it and its weight gradients going back); the
// watch reduces each where it lies (kernels/stats.h: abs min, abs max, inf
// and NaN counts), reads a layer's statistics back with one copy, and keeps
// the last 21 as frames. At the first tensor holding an inf or a NaN it
// throws NumericError naming that layer and tensor, the rank, iteration,
// micro-batch and pass, with the frames that led there (the failing one
// last): the layer that overflowed first, not the loss that ended up NaN.
// Each rank checks what it computes (its shards, its pipeline stage).
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/device_array.h"
#include "core/dtype.h"
#include "kernels/stats.h"

namespace parallm::model {

// One checked tensor: where it was, and its statistics.
struct Frame {
  std::string layer;   // "embed", "h.3", "ln_f", "lm_head"
  std::string tensor;  // "mlp.c_fc.weight", "mlp.c_fc output", "attn.c_attn.weight grad", ...
  bool backward = false;
  uint64_t micro_step = 0;  // the step context's global micro-step (iteration * gas + micro-batch)
  int64_t n = 0;            // elements
  kernels::AbsStats st;
};

class NumericWatch {
 public:
  static constexpr size_t kFrames = 21;  // frames kept (the book's detector keeps 21)
  // Checks tensors on `dev` for world rank `rank` of a run of `gas` micro-batches per iteration.
  NumericWatch(Device dev, int rank, int64_t gas);
  // The tensors of one layer in one pass: begin, add each, end. end() reads
  // their statistics back, appends the frames in order and throws
  // NumericError (with report()) at the first one that is not finite.
  void begin(std::string layer, bool backward, uint64_t micro_step);
  void add(std::string tensor, const float* x, int64_t n);
  void add(std::string tensor, const bfloat16* x, int64_t n);
  void end();

  const std::deque<Frame>& frames() const { return ring_; }
  int64_t tensors_checked() const { return checked_; }
  // The frames as a table, oldest first: abs min, abs max, inf, nan, iteration.micro-batch and pass, layer, tensor.
  std::string report() const;
  // The sentence naming frame f (its layer, tensor, counts, rank, iteration, micro-batch, pass).
  std::string where(const Frame& f) const;

 private:
  static constexpr size_t kPending = 32;  // statistics gathered per read-back
  void queued(std::string tensor, int64_t n);
  void flush();
  Device dev_;
  int rank_;
  int64_t gas_;
  DeviceArray<kernels::AbsStats> stats_;  // on dev_
  std::vector<kernels::AbsStats> host_;
  std::vector<Frame> pending_;
  std::string layer_;
  bool backward_ = false;
  uint64_t micro_step_ = 0;
  std::deque<Frame> ring_;
  int64_t checked_ = 0;
};

}  // namespace parallm::model
