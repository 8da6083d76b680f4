#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "parallel/group_ops.h"

namespace parallm::parallel {

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

}  // namespace parallm::parallel
