#include "parallel/ddp.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "kernels/ops.h"

namespace parallm::parallel {

DataParallel::DataParallel(comm::Communicator& comm, const model::ParamLayout& layout, float* grads, DdpOptions opt)
    : comm_(comm), experts_(opt.experts), dev_(opt.dev), grads_(grads) {
  PARALLM_CHECK(opt.bucket_mb > 0, ConfigError, "config", "ddp.bucket_mb must be positive, got {}", opt.bucket_mb);
  const auto cap = static_cast<int64_t>(opt.bucket_mb * 1024 * 1024 / sizeof(float));
  const int64_t first_cap = std::min<int64_t>(cap, 1024 * 1024 / sizeof(float));
  const int n = layout.num_units();
  bucket_of_unit_.assign(n, -1);
  // Cut from the front (completed last by backward), then list in launch order.
  for (int u = 0; u < n; ++u) {
    const auto r = layout.unit(u);
    const int64_t limit = buckets_.size() == 1 ? first_cap : cap;
    const bool expert = experts_ && layout.slots()[static_cast<size_t>(u)].expert_split;
    if (buckets_.empty() || buckets_.back().end - buckets_.back().begin >= limit || buckets_.back().experts != expert)
      buckets_.push_back({r.begin, r.end, 0, 0, expert, {}, nullptr});
    Bucket& b = buckets_.back();
    b.end = r.end;
    ++b.units;
    bucket_of_unit_[u] = static_cast<int>(buckets_.size()) - 1;
  }
  std::reverse(buckets_.begin(), buckets_.end());
  for (int& b : bucket_of_unit_) b = static_cast<int>(buckets_.size()) - 1 - b;
  for (Bucket& b : buckets_) {
    b.left = b.units;
    b.view = Tensor::view_of(grads_ + b.begin, {b.end - b.begin}, DType::F32, dev_);  // labelled: MPI stages it
  }
}

std::function<void(int)> DataParallel::hook() {
  return [this](int unit) { ready(unit); };
}

void DataParallel::ready(int unit) {
  PARALLM_CHECK(unit >= 0 && unit < static_cast<int>(bucket_of_unit_.size()), InternalError, "ddp",
                "unit {} out of range", unit);
  Bucket& b = buckets_[bucket_of_unit_[unit]];
  PARALLM_CHECK(b.left > 0, InternalError, "ddp", "unit {} reported twice in one step", unit);
  if (--b.left == 0)
    b.work = b.experts ? experts_->all_reduce_async(b.view, comm::ReduceOp::Sum)
                       : comm_.all_reduce_async(b.view, comm::ReduceOp::Avg);
}

void DataParallel::finish() {
  stats_ = {};
  Timer wait;
  for (Bucket& b : buckets_) {
    PARALLM_CHECK(b.work, InternalError, "ddp", "bucket [{}, {}) was never launched: backward did not report all units",
                  b.begin, b.end);
    b.work->wait();
    stats_.comm_s += b.work->seconds();
    stats_.bytes += (b.end - b.begin) * static_cast<int64_t>(sizeof(float));
    if (b.experts)  // the sum over the expert-data group, divided by the data group's size (above)
      kernels::ops_for(dev_).scale_inplace(grads_ + b.begin, b.end - b.begin, 1.0f / static_cast<float>(comm_.size()));
    b.work.reset();
    b.left = b.units;
  }
  stats_.exposed_s = wait.seconds();
}

}  // namespace parallm::parallel
