#include "model/batch_io.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"

namespace parallm::model {

namespace {
float mean_of(const float* losses, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += losses[i];
  return static_cast<float>(sum / static_cast<double>(n));
}

void check_ids(const int32_t* ids, int64_t N, int64_t V, const char* what, const char* where) {
  if (!ids) return;
  for (int64_t i = 0; i < N; ++i)
    PARALLM_CHECK(ids[i] >= 0 && ids[i] < V, ShapeError, where,
                  "{} {} at position {} is outside the vocabulary [0, {})", what, ids[i], i, V);
}
}  // namespace

BatchIo::BatchIo(Device dev, int64_t max_tokens, int max_sets) : dev_(dev), max_tokens_(max_tokens) {
  if (dev.is_cpu()) return;
  tokens_d_ = DeviceArray<int32_t>(max_tokens * max_sets, MemCategory::Activations, dev);
  targets_d_ = DeviceArray<int32_t>(max_tokens * max_sets, MemCategory::Activations, dev);
  staging_ = gpu::PinnedBuffer(static_cast<size_t>(3 * max_tokens) * 4, MemCategory::Other);
  uploaded_ = std::make_unique<gpu::Event>();
  losses_copied_ = std::make_unique<gpu::Event>();
}

BatchIo::~BatchIo() = default;

void BatchIo::begin(int set, const int32_t*& tokens, const int32_t*& targets, int64_t N, int64_t V, const char* where) {
  check_ids(tokens, N, V, "token", where);
  check_ids(targets, N, V, "target", where);
  if (dev_.is_cpu() || (!tokens && !targets)) return;
  PARALLM_CHECK(pending_losses_ == 0, InternalError, where,
                "the previous forward's deferred loss was not read (deferred_loss())");
  uploaded_->wait();  // the staging is reused only once the previous upload has left it
  auto* stage = staging_.as<int32_t>();
  const int64_t at = set * max_tokens_;
  if (tokens) {
    std::copy(tokens, tokens + N, stage);
    gpu::memcpy_h2d_async(tokens_d_.data() + at, stage, N * sizeof(int32_t));
    tokens = tokens_d_.data() + at;
  }
  if (targets) {
    std::copy(targets, targets + N, stage + max_tokens_);
    gpu::memcpy_h2d_async(targets_d_.data() + at, stage + max_tokens_, N * sizeof(int32_t));
    targets = targets_d_.data() + at;
  }
  uploaded_->record();
}

const int32_t* BatchIo::device_tokens(int set) const {
  return dev_.is_cpu() ? nullptr : tokens_d_.data() + set * max_tokens_;
}

float BatchIo::loss(const float* losses, int64_t N, bool defer) {
  if (dev_.is_cpu()) return mean_of(losses, N);
  gpu::memcpy_d2h_async(staging_.as<float>() + 2 * max_tokens_, losses, N * sizeof(float));
  losses_copied_->record();
  pending_losses_ = N;
  return defer ? std::numeric_limits<float>::quiet_NaN() : deferred_loss();
}

float BatchIo::deferred_loss() {
  PARALLM_CHECK(pending_losses_ > 0, InternalError, "gpt.deferred_loss", "no forward with a deferred loss on the GPU");
  losses_copied_->wait();
  const int64_t n = std::exchange(pending_losses_, 0);
  return mean_of(staging_.as<float>() + 2 * max_tokens_, n);
}

}  // namespace parallm::model
