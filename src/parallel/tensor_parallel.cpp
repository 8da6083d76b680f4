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

void TensorParallelGroup::all_to_all(const int32_t* in, int32_t* out, int64_t n) {
  const int64_t all = n * c_.size();
  c_.all_to_all(view(in, all, DType::I32, dev_), view(out, all, DType::I32, dev_));
}

namespace {
template <class T>
void exchange(comm::Communicator& c, Device dev, DType dt, const T* in, const int64_t* send, T* out,
              const int64_t* recv) {
  const size_t n = static_cast<size_t>(c.size());
  std::vector<int64_t> s(send, send + n), r(recv, recv + n);
  int64_t ns = 0, nr = 0;
  for (size_t i = 0; i < n; ++i) {
    ns += s[i];
    nr += r[i];
  }
  c.all_to_all_v(view(in, ns, dt, dev), std::move(s), view(out, nr, dt, dev), std::move(r));
}
}  // namespace

void TensorParallelGroup::all_to_all_v(const float* in, const int64_t* send, float* out, const int64_t* recv) {
  exchange(c_, dev_, DType::F32, in, send, out, recv);
}

void TensorParallelGroup::all_to_all_v(const bfloat16* in, const int64_t* send, bfloat16* out, const int64_t* recv) {
  exchange(c_, dev_, DType::BF16, in, send, out, recv);
}

}  // namespace parallm::parallel
