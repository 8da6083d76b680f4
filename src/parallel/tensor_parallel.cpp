#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace parallm::parallel {

namespace {
template <class T>
Tensor view(T* p, int64_t n, DType dt, Device dev) {
  return Tensor::view_of(const_cast<std::remove_const_t<T>*>(p), {n}, dt, dev);
}
}  // namespace

void TensorParallelGroup::sum(float* x, int64_t n) {
  c_.all_reduce(view(x, n, DType::F32, dev_), comm::ReduceOp::Sum);
}

void TensorParallelGroup::sum(bfloat16* x, int64_t n) {
  c_.all_reduce(view(x, n, DType::BF16, dev_), comm::ReduceOp::Sum);
}

void TensorParallelGroup::max(float* x, int64_t n) {
  c_.all_reduce(view(x, n, DType::F32, dev_), comm::ReduceOp::Max);
}

void TensorParallelGroup::gather(const float* in, float* out, int64_t n) {
  c_.all_gather(view(in, n, DType::F32, dev_), view(out, n * c_.size(), DType::F32, dev_));
}

void TensorParallelGroup::gather(const bfloat16* in, bfloat16* out, int64_t n) {
  c_.all_gather(view(in, n, DType::BF16, dev_), view(out, n * c_.size(), DType::BF16, dev_));
}

void TensorParallelGroup::reduce_scatter(const float* in, float* out, int64_t n) {
  c_.reduce_scatter(view(in, n * c_.size(), DType::F32, dev_), view(out, n, DType::F32, dev_), comm::ReduceOp::Sum);
}

void TensorParallelGroup::reduce_scatter(const bfloat16* in, bfloat16* out, int64_t n) {
  c_.reduce_scatter(view(in, n * c_.size(), DType::BF16, dev_), view(out, n, DType::BF16, dev_), comm::ReduceOp::Sum);
}

void gather_whole(comm::Communicator& tp, const model::ParamLayout& part, const model::ParamLayout& whole,
                  const float* mine, float* out) {
  PARALLM_CHECK(part.spec().tp == tp.size() && part.slots().size() == whole.slots().size(), InternalError,
                "parallel.tp", "a layout for tp={} gathered over a group of {}", part.spec().tp, tp.size());
  std::vector<float> buf(static_cast<size_t>(whole.total()), 0.0f);
  for (int s = 0; s < static_cast<int>(part.slots().size()); ++s)  // replicated slots come from rank 0 alone
    if (part.slots()[s].placement.sharded() || tp.rank() == 0)
      part.place(s, mine + part.slots()[s].offset, buf.data() + whole.slots()[s].offset);
  tp.reduce(Tensor::view_of(buf.data(), {whole.total()}, DType::F32), comm::ReduceOp::Sum, 0);
  if (tp.rank() == 0) std::copy(buf.begin(), buf.end(), out);
}

void slice_whole(const model::ParamLayout& part, const model::ParamLayout& whole, const float* in, float* mine) {
  for (int s = 0; s < static_cast<int>(part.slots().size()); ++s)
    part.slice(s, in + whole.slots()[s].offset, mine + part.slots()[s].offset);
}

}  // namespace parallm::parallel
