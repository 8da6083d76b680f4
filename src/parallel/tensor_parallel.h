// Tensor parallelism's group for the model: model::TensorGroup (the blocking
// collectives Megatron's layers need) over the mesh's tp communicator (and,
// the same class, over the data and expert-parallel groups an MoE layer uses).
//
// The model (model/gpt.h) holds this rank's part of each parameter, as the
// layout's sharding table says, and calls the group where Megatron's layers
// communicate; nothing else changes for the rest of the run: the gradient sync
// works on the dp group over each rank's local parameters, and the optimizer
// updates them in place. A group of one rank is the whole model.
#pragma once
#include "comm/communicator.h"
#include "core/device.h"
#include "model/params.h"
#include "model/tensor_group.h"

namespace parallm::parallel {

class TensorParallelGroup final : public model::TensorGroup {
 public:
  // `tp`: the mesh's tensor-parallel communicator (not owned); `dev`: where
  // the model's buffers live (device pointers need a GPU-aware backend: nccl).
  TensorParallelGroup(comm::Communicator& tp, Device dev) : c_(tp), dev_(dev) {}
  int size() const override { return c_.size(); }
  int rank() const override { return c_.rank(); }
  void sum(float* x, int64_t n) override;
  void sum(bfloat16* x, int64_t n) override;
  void max(float* x, int64_t n) override;
  void gather(const float* in, float* out, int64_t n) override;
  void gather(const bfloat16* in, bfloat16* out, int64_t n) override;
  void reduce_scatter(const float* in, float* out, int64_t n) override;
  void reduce_scatter(const bfloat16* in, bfloat16* out, int64_t n) override;
  void all_to_all(const int32_t* in, int32_t* out, int64_t n) override;
  void all_to_all_v(const float* in, const int64_t* send, float* out, const int64_t* recv) override;
  void all_to_all_v(const bfloat16* in, const int64_t* send, bfloat16* out, const int64_t* recv) override;
  comm::Communicator& comm() const { return c_; }

 private:
  comm::Communicator& c_;
  Device dev_;
};

}  // namespace parallm::parallel
