// Deterministic data parallelism (ddp.deterministic=true): the gradient and
// the logged losses of a step come out bit for bit the same however the
// global batch is split over ranks, as long as every part ("shard") is
// computed the same way.
//
// A floating-point sum depends on its order, and MPI_Allreduce picks its
// order by message size and world size. Here the order is fixed instead:
// each shard's gradient is computed alone (into zeroed gradients), and the
// shards of a micro-step are added left to right in global sample order,
// ((g0 + g1) + g2) + ..., then the micro-steps in order, then scaled by
// 1/shards. Across ranks (one shard per rank) the ordered sum is an
// all-to-all of segments, a local sum over ranks in rank order and an
// all-gather (bandwidth like a ring all-reduce, no overlap with backward).
// One process reproduces an N-rank run by cutting its batch into N shards
// (ddp.shards=N) and adding them in the same order.
//
// On a GPU the buffers are the device's and the copies, additions and the
// scaling its kernels: each is element by element, so the device's sums
// carry the host's bits for the same shard gradients.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/device_array.h"
#include "core/tensor.h"

namespace parallm::parallel {

// In place: data becomes the element-wise sum over ranks in rank order,
// identical on every rank. n may be anything (segments are padded).
// data lives on `dev`.
class OrderedSum {
 public:
  OrderedSum(comm::Communicator& comm, int64_t n, Device dev = Device::cpu());
  void operator()(float* data);

 private:
  comm::Communicator& comm_;
  int64_t n_, seg_;
  Device dev_;
  DeviceArray<float> send_, recv_, mine_, all_;
};

class DeterministicGrads {
 public:
  // n: gradient size; local_shards: shards this rank computes per micro-step
  // (more than 1 only on a single rank). shards() = ranks x local_shards.
  // The gradients live on `dev`.
  DeterministicGrads(comm::Communicator& comm, int64_t n, int local_shards, Device dev = Device::cpu());
  int shards() const { return shards_; }
  int local_shards() const { return local_; }
  // Starts a step (gas micro-steps follow).
  void begin_step();
  // After local shard j of the current micro-step: g holds that shard's gradient alone.
  void add_shard(int j, const float* g);
  // After the micro-step's last local shard; g is scratch (the model's gradients).
  void end_micro_step(float* g);
  // g = the step's gradient: sum over micro-steps and shards, times 1/shards.
  void finish(float* g);
  double comm_seconds() const { return comm_s_; }
  // The mean of the shard losses of `steps` batches, in the same fixed order:
  // local[k * local_shards + j] is local shard j of batch k on this rank.
  float mean_loss(const std::vector<float>& local, int64_t steps);

 private:
  comm::Communicator& comm_;
  int64_t n_;
  Device dev_;
  int local_, shards_;
  int micro_ = 0;
  DeviceArray<float> shard_sum_, acc_;
  OrderedSum sum_;
  double comm_s_ = 0;
  Tensor loss_in_, loss_out_;  // gathered shard losses (sized on first use)
  std::vector<float> loss_all_;
};

}  // namespace parallm::parallel
