// Context parallelism's group for the model: model::ContextGroup (the ring's
// point-to-point exchanges and Ulysses' all-to-alls) over the mesh's cp
// communicator.
//
// The sequence split is model/cp_layout.h's table; the model runs its passes
// on this rank's T/C positions and calls the group only inside attention.
// Everything else follows from two facts: cp ranks hold the same weights
// (gradients are averaged over dp x cp: Mesh::dp_cp) and the same samples
// (the loader gives them the positions of one dp rank's batch).
#pragma once
#include <array>

#include "comm/communicator.h"
#include "core/device.h"
#include "model/context_group.h"

namespace parallm::parallel {

class ContextParallelGroup final : public model::ContextGroup {
 public:
  // `cp`: the mesh's context-parallel communicator (not owned); `dev`: where
  // the model's buffers live (device pointers need a GPU-aware backend: nccl).
  ContextParallelGroup(comm::Communicator& cp, Device dev) : c_(cp), dev_(dev) {}
  int size() const override { return c_.size(); }
  int rank() const override { return c_.rank(); }
  void start_ring(const float* send, float* recv, int64_t n, int tag) override;
  void wait_ring(int tag) override;
  void all_to_all(const float* in, float* out, int64_t n) override;
  void all_to_all(const bfloat16* in, bfloat16* out, int64_t n) override;
  comm::Communicator& comm() const { return c_; }

 private:
  static constexpr int kTags = 8;
  comm::Communicator& c_;
  Device dev_;
  std::array<comm::WorkPtr, kTags> sends_{}, recvs_{};
};

}  // namespace parallm::parallel
