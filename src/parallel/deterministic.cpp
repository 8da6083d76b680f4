#include "parallel/deterministic.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/gpu.h"
#include "core/timer.h"
#include "kernels/ops.h"

namespace parallm::parallel {

namespace {
// n floats from src to dst, both on `dev`.
void copy_on(Device dev, float* dst, const float* src, int64_t n) {
  if (dev.is_cpu())
    std::copy_n(src, n, dst);
  else
    gpu::memcpy_d2d(dst, src, static_cast<size_t>(n) * sizeof(float));
}
Tensor view_on(Device dev, float* p, int64_t n) {
  return Tensor::view_of(p, {n}, DType::F32, dev);
}
}  // namespace

OrderedSum::OrderedSum(comm::Communicator& comm, int64_t n, Device dev) : comm_(comm), n_(n), dev_(dev) {
  const int p = comm.size();
  seg_ = (n + p - 1) / p;
  if (p == 1) return;
  // Zero-filled: the padding past n stays zero.
  send_ = DeviceArray<float>(static_cast<size_t>(seg_ * p), MemCategory::Comm, dev);
  recv_ = DeviceArray<float>(static_cast<size_t>(seg_ * p), MemCategory::Comm, dev);
  mine_ = DeviceArray<float>(static_cast<size_t>(seg_), MemCategory::Comm, dev);
  all_ = DeviceArray<float>(static_cast<size_t>(seg_ * p), MemCategory::Comm, dev);
}

void OrderedSum::operator()(float* data) {
  const int p = comm_.size();
  if (p == 1) return;
  const auto& k = kernels::ops_for(dev_);
  copy_on(dev_, send_.data(), data, n_);
  // Block q of recv_ is rank q's copy of this rank's segment.
  comm_.all_to_all(view_on(dev_, send_.data(), seg_ * p), view_on(dev_, recv_.data(), seg_ * p));
  copy_on(dev_, mine_.data(), recv_.data(), seg_);
  for (int q = 1; q < p; ++q) k.add_inplace(mine_.data(), recv_.data() + q * seg_, seg_);
  comm_.all_gather(view_on(dev_, mine_.data(), seg_), view_on(dev_, all_.data(), seg_ * p));
  copy_on(dev_, data, all_.data(), n_);
}

DeterministicGrads::DeterministicGrads(comm::Communicator& comm, int64_t n, int local_shards, Device dev)
    : comm_(comm), n_(n), dev_(dev), local_(local_shards), shards_(local_shards * comm.size()), sum_(comm, n, dev) {
  PARALLM_CHECK(local_shards >= 1, ConfigError, "ddp", "ddp.shards: {} shards per rank", local_shards);
  PARALLM_CHECK(comm.size() == 1 || local_shards == 1, ConfigError, "ddp",
                "ddp.shards: one shard per rank when running on {} ranks, not {}", comm.size(), local_shards);
  if (local_ > 1) shard_sum_ = DeviceArray<float>(static_cast<size_t>(n), MemCategory::Grads, dev);
  acc_ = DeviceArray<float>(static_cast<size_t>(n), MemCategory::Grads, dev);
}

void DeterministicGrads::begin_step() {
  micro_ = 0;
  comm_s_ = 0;
}

void DeterministicGrads::add_shard(int j, const float* g) {
  if (local_ == 1) return;  // the model's gradients are the shard's sum already
  if (j == 0)
    copy_on(dev_, shard_sum_.data(), g, n_);
  else
    kernels::ops_for(dev_).add_inplace(shard_sum_.data(), g, n_);
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
  if (micro_++ == 0)
    copy_on(dev_, acc_.data(), src, n_);
  else
    kernels::ops_for(dev_).add_inplace(acc_.data(), src, n_);
}

void DeterministicGrads::finish(float* g) {
  PARALLM_CHECK(micro_ > 0, InternalError, "ddp", "finish() before any micro-step");
  copy_on(dev_, g, acc_.data(), n_);
  kernels::ops_for(dev_).scale_inplace(g, n_, 1.0f / static_cast<float>(shards_));
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
