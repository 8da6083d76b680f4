// The numeric detector's frames and report (numeric_watch.h).
#include "model/numeric_watch.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "core/error.h"
#include "kernels/ops.h"

namespace parallm::model {

NumericWatch::NumericWatch(Device dev, int rank, int64_t gas)
    : dev_(dev), rank_(rank), gas_(gas > 0 ? gas : 1), stats_(kPending, MemCategory::Other, dev), host_(kPending) {
  pending_.reserve(kPending);
}

void NumericWatch::begin(std::string layer, bool backward, uint64_t micro_step) {
  PARALLM_CHECK(pending_.empty(), InternalError, "numeric", "begin({}) with {}'s tensors not ended", layer, layer_);
  layer_ = std::move(layer);
  backward_ = backward;
  micro_step_ = micro_step;
}

void NumericWatch::queued(std::string tensor, int64_t n) {
  Frame f;
  f.layer = layer_;
  f.tensor = std::move(tensor);
  f.backward = backward_;
  f.micro_step = micro_step_;
  f.n = n;
  pending_.push_back(std::move(f));
  if (pending_.size() == kPending) flush();
}

void NumericWatch::add(std::string tensor, const float* x, int64_t n) {
  kernels::abs_stats(dev_, stats_.data() + pending_.size(), x, n);
  queued(std::move(tensor), n);
}

void NumericWatch::add(std::string tensor, const bfloat16* x, int64_t n) {
  kernels::abs_stats(dev_, stats_.data() + pending_.size(), x, n);
  queued(std::move(tensor), n);
}

void NumericWatch::end() {
  flush();
}

void NumericWatch::flush() {
  if (pending_.empty()) return;
  stats_.copy_to_host(host_.data(), pending_.size());  // one copy (and wait) per layer on a GPU
  std::vector<Frame> batch = std::move(pending_);
  pending_.clear();
  pending_.reserve(kPending);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].st = host_[i];
    ring_.push_back(std::move(batch[i]));
    if (ring_.size() > kFrames) ring_.pop_front();
    ++checked_;
    if (!ring_.back().st.finite())
      throw NumericError("numeric", fmt::format("{}. The last {} frames, oldest first (abs min over the finite "
                                                "nonzero values, abs max over the finite ones):\n{}",
                                                where(ring_.back()), ring_.size(), report()));
  }
}

std::string NumericWatch::where(const Frame& f) const {
  return fmt::format(
      "non-finite values first in layer {} tensor \"{}\" ({} inf, {} nan of {} values) on rank {}, iteration {}, "
      "micro-batch {}, {} pass (train.detect_anomaly)",
      f.layer, f.tensor, f.st.inf, f.st.nan, f.n, rank_, f.micro_step / static_cast<uint64_t>(gas_),
      f.micro_step % static_cast<uint64_t>(gas_), f.backward ? "backward" : "forward");
}

std::string NumericWatch::report() const {
  auto num = [](float v) { return std::isinf(v) ? std::string("-") : fmt::format("{:.2e}", v); };
  std::string t = fmt::format("  {:>9} {:>9} {:>8} {:>8}  {:<12} {:<10} {}\n", "abs min", "abs max", "inf", "nan",
                              "iter.micro", "layer", "tensor");
  for (const Frame& f : ring_) {
    const std::string at = fmt::format("{}.{} {}", f.micro_step / static_cast<uint64_t>(gas_),
                                       f.micro_step % static_cast<uint64_t>(gas_), f.backward ? "bwd" : "fwd");
    t += fmt::format("  {:>9} {:>9} {:>8} {:>8}  {:<12} {:<10} {}{}\n", num(f.st.abs_min), num(f.st.abs_max), f.st.inf,
                     f.st.nan, at, f.layer, f.tensor, f.st.finite() ? "" : "   <- non-finite");
  }
  return t;
}

}  // namespace parallm::model
