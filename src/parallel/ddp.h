// Data parallelism (DDP): every rank holds the whole model, reads its own
// slice of each global batch, and gradients are averaged across ranks.
//
// Gradients live in one flat buffer made of units (one per parameter, see
// ParamLayout), which backward finishes in nearly reverse layout order.
// Buckets are runs of adjacent units, about ddp.bucket_mb each, cut from the
// front of the buffer: the first bucket (the one backward completes last,
// holding the embeddings) is capped at 1 MiB, so little communication is left
// to start once backward ends; the remainder bucket lands at the top, where
// backward starts. When backward reports a unit final, its bucket counts
// down; a complete bucket's all-reduce (average) is issued at once on the
// communicator's thread, overlapping the rest of backward. finish() waits for
// the buckets and records how much communication time was not hidden.
//
// Expert parallelism: the experts' slots (held by one rank of each ep group)
// form buckets of their own, summed over the expert-data group (the ranks
// holding the same experts) and divided by the data group's size: each
// expert's gradient already sums the tokens every rank of the ep group sent
// it, so this is the data group's mean, as for every other parameter.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "model/params.h"

namespace parallm::parallel {

struct DdpOptions {
  double bucket_mb = 25.0;
  comm::Communicator* experts = nullptr;  // expert parallel: the expert-data group (null: no expert slots apart)
  Device dev = Device::cpu();             // where the gradients live (the experts' division)
};

// Per optimizer step: total time the all-reduces ran on the comm thread, and
// the part of it the caller waited for after backward (not overlapped).
struct DdpStats {
  double comm_s = 0, exposed_s = 0;
  int64_t bytes = 0;  // payload all-reduced this step
};

class DataParallel {
 public:
  DataParallel(comm::Communicator& comm, const model::ParamLayout& layout, float* grads, DdpOptions opt = {});

  // The hook for StepContext::grads_ready on the micro-step that synchronizes
  // (with gradient accumulation, only the last one does).
  std::function<void(int)> hook();
  // Waits for every bucket; afterwards the gradients are the mean over ranks.
  void finish();
  const DdpStats& stats() const { return stats_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // [begin, end) of bucket i in the flat buffer, in launch order.
  model::ParamLayout::Range bucket(int i) const { return {buckets_[i].begin, buckets_[i].end}; }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;
    int units = 0, left = 0;
    bool experts = false;  // expert slots: summed over the expert-data group
    Tensor view;           // grads[begin, end), made once
    comm::WorkPtr work;
  };
  void ready(int unit);

  comm::Communicator& comm_;
  comm::Communicator* experts_;
  Device dev_;
  float* grads_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_unit_;
  DdpStats stats_;
};

}  // namespace parallm::parallel
