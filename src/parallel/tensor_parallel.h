// Tensor parallelism's group for the model: model::TensorGroup (the blocking
// collectives Megatron's layers need) over the mesh's tp communicator.
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
  comm::Communicator& comm() const { return c_; }

 private:
  comm::Communicator& c_;
  Device dev_;
};

// Checkpoints hold the whole model (the one-rank layout `whole`), so they
// load at any tp and pp. gather_whole: the whole flat buffer from every rank's
// part (`mine`, host floats of part.total()) into `out` on the group's rank 0
// (others pass nullptr); `tp` is the group holding the whole model between
// its ranks (tensor x pipeline parallel); collective, exact (each element
// comes from one rank: a replicated slot from tp rank 0, the tied table from
// the first stage). Each rank sends its elements (in runs of the whole
// tensor) to rank 0 in turn, so no rank but the root holds more than its part.
// slice_whole: this rank's part of a whole flat buffer.
void gather_whole(comm::Communicator& tp, const model::ParamLayout& part, const model::ParamLayout& whole,
                  const float* mine, float* out);
void slice_whole(const model::ParamLayout& part, const model::ParamLayout& whole, const float* in, float* mine);
// Layout group g of the whole model (`out`, whole.group(g)'s length, on the
// group's rank 0; others pass nullptr) from every rank's group g (`mine`,
// part.group(g)'s length): one gather of the parts (the root holds tp of
// them, about the whole group, besides `out`), replicated slots from rank 0.
// Collective over `tp`, exact.
void gather_whole_group(comm::Communicator& tp, const model::ParamLayout& part, const model::ParamLayout& whole, int g,
                        const float* mine, float* out);

}  // namespace parallm::parallel
