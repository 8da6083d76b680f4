// The model's tensor-parallel group, and Megatron's conjugate operators over it.
//
// Tensor parallelism splits each layer over a group (parallel/tensor_parallel.h
// builds one on the mesh's tp communicator); the model sees only the few
// blocking collectives below, on buffers of its own device, so the model layer
// stays below comm/. A model without a group (nullptr) is the one-rank model.
//
// Megatron's layers talk through conjugate pairs; with explicit passes each
// pair is a forward half and a backward half, named for the pair:
//   copy    (into a column-parallel linear): forward identity,       backward all-reduce
//   reduce  (out of a row-parallel linear):  forward all-reduce,     backward identity
// and with sequence parallelism, where the residual stream is split by rows:
//   gather  (into a column-parallel linear): forward all-gather,     backward reduce-scatter
//   scatter (out of a row-parallel linear):  forward reduce-scatter, backward all-gather
// Writing the model with these names makes its passes read like the paper's
// figure: one reduce (or scatter) per attention block and one per MLP block in
// forward, one copy-backward (or gather-backward) for each in backward.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::model {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place over the group: x = sum (or max) of every rank's x.
  virtual void sum(float* x, int64_t n) = 0;
  virtual void sum(bfloat16* x, int64_t n) = 0;
  virtual void max(float* x, int64_t n) = 0;
  // out[r * n, (r + 1) * n) = rank r's in[0, n).
  virtual void gather(const float* in, float* out, int64_t n) = 0;
  virtual void gather(const bfloat16* in, bfloat16* out, int64_t n) = 0;
  // out[0, n) = the sum over ranks of their in[rank * n, (rank + 1) * n).
  virtual void reduce_scatter(const float* in, float* out, int64_t n) = 0;
  virtual void reduce_scatter(const bfloat16* in, bfloat16* out, int64_t n) = 0;
  // Expert parallelism's exchanges. out[r * n, (r + 1) * n) = rank r's
  // in[rank * n, (rank + 1) * n): the per-expert counts.
  virtual void all_to_all(const int32_t* in, int32_t* out, int64_t n) = 0;
  // send[j] elements of `in` (in rank order) to rank j; recv[i] elements from
  // rank i into `out` (in rank order). Empty messages take part like the others.
  virtual void all_to_all_v(const float* in, const int64_t* send, float* out, const int64_t* recv) = 0;
  virtual void all_to_all_v(const bfloat16* in, const int64_t* send, bfloat16* out, const int64_t* recv) = 0;
};

// The forward half of `reduce`: the partial sums of a row-parallel linear
// become the whole output on every rank.
template <class A>
void reduce_forward(TensorGroup* tp, A* x, int64_t n) {
  if (tp) tp->sum(x, n);
}
// The backward half of `copy`: the partial input gradients of a
// column-parallel linear become the whole input gradient on every rank.
template <class A>
void copy_backward(TensorGroup* tp, A* dx, int64_t n) {
  if (tp) tp->sum(dx, n);
}

// Sequence parallel: `local` (n elements, this rank's rows) into `whole`
// (every rank's rows in rank order); backward sums the whole gradient's parts
// into this rank's rows.
template <class A>
void gather_forward(TensorGroup* tp, const A* local, A* whole, int64_t n) {
  tp->gather(local, whole, n);
}
template <class A>
void gather_backward(TensorGroup* tp, const A* dwhole, A* dlocal, int64_t n) {
  tp->reduce_scatter(dwhole, dlocal, n);
}
// Sequence parallel: a row-parallel linear's partial sums, reduced and split
// by rows (n elements each); backward gathers the rows' gradients.
template <class A>
void scatter_forward(TensorGroup* tp, const A* partial, A* local, int64_t n) {
  tp->reduce_scatter(partial, local, n);
}
template <class A>
void scatter_backward(TensorGroup* tp, const A* dlocal, A* dwhole, int64_t n) {
  tp->gather(dlocal, dwhole, n);
}

}  // namespace parallm::model
