#include "parallel/deterministic.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"

namespace parallm::parallel {

OrderedSum::OrderedSum(comm::Communicator& comm, int64_t n) : comm_(comm), n_(n) {
  const int p = comm.size();
  seg_ = (n + p - 1) / p;
  if (p == 1) return;
  send_ = Tensor::empty({seg_ * p}, DType::F32, MemCategory::Comm);
  recv_ = Tensor::empty({seg_ * p}, DType::F32, MemCategory::Comm);
  mine_ = Tensor::empty({seg_}, DType::F32, MemCategory::Comm);
  all_ = Tensor::empty({seg_ * p}, DType::F32, MemCategory::Comm);
  std::fill_n(send_.data<float>() + n, seg_ * p - n, 0.0f);  // the padding stays zero
}

void OrderedSum::operator()(float* data) {
  const int p = comm_.size();
  if (p == 1) return;
  std::copy_n(data, n_, send_.data<float>());
  comm_.all_to_all(send_, recv_);  // block q of recv_ is rank q's copy of this rank's segment
  const float* r = recv_.data<float>();
  float* m = mine_.data<float>();
  std::copy_n(r, seg_, m);
  for (int q = 1; q < p; ++q) {
    const float* rq = r + q * seg_;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < seg_; ++i) m[i] += rq[i];
  }
  comm_.all_gather(mine_, all_);
  std::copy_n(all_.data<float>(), n_, data);
}

DeterministicGrads::DeterministicGrads(comm::Communicator& comm, int64_t n, int local_shards)
    : comm_(comm), n_(n), local_(local_shards), shards_(local_shards * comm.size()), sum_(comm, n) {
  PARALLM_CHECK(local_shards >= 1, ConfigError, "ddp", "ddp.shards: {} shards per rank", local_shards);
  PARALLM_CHECK(comm.size() == 1 || local_shards == 1, ConfigError, "ddp",
                "ddp.shards: one shard per rank when running on {} ranks, not {}", comm.size(), local_shards);
  if (local_ > 1) shard_sum_.assign(n, 0.0f);
  acc_.assign(n, 0.0f);
}

void DeterministicGrads::begin_step() {
  micro_ = 0;
  comm_s_ = 0;
}

void DeterministicGrads::add_shard(int j, const float* g) {
  if (local_ == 1) return;  // the model's gradients are the shard's sum already
  float* s = shard_sum_.data();
  if (j == 0) {
    std::copy_n(g, n_, s);
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n_; ++i) s[i] += g[i];
}

void DeterministicGrads::end_micro_step(float* g) {
  float* src = g;
  if (local_ > 1) {
    src = shard_sum_.data();
  } else {
    Timer t;
    sum_(g);
    comm_s_ += t.seconds();
  }
  float* a = acc_.data();
  if (micro_++ == 0) {
    std::copy_n(src, n_, a);
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n_; ++i) a[i] += src[i];
}

void DeterministicGrads::finish(float* g) {
  PARALLM_CHECK(micro_ > 0, InternalError, "ddp", "finish() before any micro-step");
  const float inv = 1.0f / static_cast<float>(shards_);
  const float* a = acc_.data();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n_; ++i) g[i] = a[i] * inv;
}

float DeterministicGrads::mean_loss(const std::vector<float>& local, int64_t steps) {
  PARALLM_CHECK(static_cast<int64_t>(local.size()) == steps * local_, InternalError, "ddp",
                "{} shard losses for {} batches of {} shards", local.size(), steps, local_);
  const int p = comm_.size();
  const float* all = local.data();
  if (p > 1) {
    // Gathered rank-major (rank q's loss of batch k at q * steps + k), reordered batch-major.
    // A fresh Tensor is a scalar (numel 1, no storage): sized by data, not by count alone.
    if (!loss_in_.defined() || loss_in_.numel() != steps) {
      loss_in_ = Tensor::empty({steps}, DType::F32);
      loss_out_ = Tensor::empty({steps * p}, DType::F32);
      loss_all_.resize(steps * p);
    }
    std::copy_n(local.data(), steps, loss_in_.data<float>());
    comm_.all_gather(loss_in_, loss_out_);
    const float* out = loss_out_.data<float>();
    for (int q = 0; q < p; ++q)
      for (int64_t k = 0; k < steps; ++k) loss_all_[k * p + q] = out[q * steps + k];
    all = loss_all_.data();
  }
  // Batch by batch, each batch's shards left to right: the gradient's order.
  double total = 0;
  for (int64_t k = 0; k < steps; ++k) {
    float s = all[k * shards_];
    for (int j = 1; j < shards_; ++j) s += all[k * shards_ + j];
    total += s;
  }
  return static_cast<float>(total / static_cast<double>(steps * shards_));
}

}  // namespace parallm::parallel
