#include "parallel/context_parallel.h"

#include "core/error.h"
#include "parallel/group_ops.h"

namespace parallm::parallel {

void ContextParallelGroup::start_ring(const float* send, float* recv, int64_t n, int tag) {
  PARALLM_CHECK(tag >= 0 && tag < kTags && !sends_[tag], InternalError, "parallel.cp",
                "ring exchange {} started twice or out of range {}", tag, c_.where());
  const int C = c_.size(), r = c_.rank();
  // The receive first: with the next rank's send posted already, nothing waits on ordering.
  recvs_[tag] = c_.recv_async(view(recv, n, DType::F32, dev_), (r + C - 1) % C, tag);
  sends_[tag] = c_.send_async(view(send, n, DType::F32, dev_), (r + 1) % C, tag);
}

void ContextParallelGroup::wait_ring(int tag) {
  PARALLM_CHECK(tag >= 0 && tag < kTags && sends_[tag], InternalError, "parallel.cp",
                "ring exchange {} waited for but not started {}", tag, c_.where());
  const comm::WorkPtr s = std::move(sends_[tag]), r = std::move(recvs_[tag]);
  sends_[tag].reset();
  recvs_[tag].reset();
  s->wait();
  r->wait();
}

void ContextParallelGroup::all_to_all(const float* in, float* out, int64_t n) {
  c_.all_to_all(view(in, n, DType::F32, dev_), view(out, n, DType::F32, dev_));
}

void ContextParallelGroup::all_to_all(const bfloat16* in, bfloat16* out, int64_t n) {
  c_.all_to_all(view(in, n, DType::BF16, dev_), view(out, n, DType::BF16, dev_));
}

}  // namespace parallm::parallel
