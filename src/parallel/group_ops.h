// Small collectives over a group that the training loop and the gradient
// syncs use every step: a float's mean and a bool's "true everywhere", each
// through a one-element buffer made once. On a group of one rank they
// communicate nothing.
#pragma once
#include <cstring>
#include <string>
#include <type_traits>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace parallm::parallel {

// A model's buffer (n elements of `dt` on `dev`) as a tensor for the
// communicator: what the model's groups (tensor, context parallel) hand it.
template <class T>
Tensor view(T* p, int64_t n, DType dt, Device dev) {
  return Tensor::view_of(const_cast<std::remove_const_t<T>*>(p), {n}, dt, dev);
}

// One float averaged over the group.
class GroupMean {
 public:
  explicit GroupMean(comm::Communicator& g) : g_(g), t_(Tensor::empty({1}, DType::F32)) {}
  float operator()(float v) {
    if (g_.size() == 1) return v;
    t_.data<float>()[0] = v;
    g_.all_reduce(t_, comm::ReduceOp::Avg);
    return t_.data<float>()[0];
  }

 private:
  comm::Communicator& g_;
  Tensor t_;
};

// True on every rank when it is true on every rank of the group.
class GroupAll {
 public:
  explicit GroupAll(comm::Communicator& g) : g_(g), t_(Tensor::empty({1}, DType::I32)) {}
  bool operator()(bool v) {
    if (g_.size() == 1) return v;
    t_.data<int32_t>()[0] = v ? 1 : 0;
    g_.all_reduce(t_, comm::ReduceOp::Min);
    return t_.data<int32_t>()[0] != 0;
  }

 private:
  comm::Communicator& g_;
  Tensor t_;
};

// A double (or a 64-bit integer, added wrapping) summed over the group in rank order: the same bits on every rank.
template <class T>
class GroupSumOf {
  static_assert(sizeof(T) == 8, "sent as two int32 words");

 public:
  explicit GroupSumOf(comm::Communicator& g)
      : g_(g), mine_(Tensor::empty({2}, DType::I32)), all_(Tensor::empty({2 * g.size()}, DType::I32)) {}
  int rank() const { return g_.rank(); }
  T operator()(T v) {
    if (g_.size() == 1) return v;
    std::memcpy(mine_.raw(), &v, sizeof v);
    g_.all_gather(mine_, all_);
    T sum = 0;
    for (int r = 0; r < g_.size(); ++r) {
      T x = 0;
      std::memcpy(&x, all_.data<int32_t>() + 2 * r, sizeof x);
      sum += x;
    }
    return sum;
  }

 private:
  comm::Communicator& g_;
  Tensor mine_, all_;
};
using GroupSum = GroupSumOf<double>;

// Rank 0's floats on every rank of the group.
// Rank 0's n floats at `p` (on `dev`: a host-only backend stages device memory by the label) on every rank.
inline void broadcast_floats(comm::Communicator& g, float* p, int64_t n, Device dev = Device::cpu()) {
  if (g.size() > 1) g.broadcast(Tensor::view_of(p, {n}, DType::F32, dev), 0);
}

// Rank `root`'s flag on every rank of the group.
inline bool broadcast_flag(comm::Communicator& g, bool v, int root) {
  if (g.size() == 1) return v;
  Tensor t = Tensor::empty({1}, DType::I32);
  t.data<int32_t>()[0] = v ? 1 : 0;
  g.broadcast(t, root);
  return t.data<int32_t>()[0] != 0;
}

// Rank `root`'s text on every rank of the group (a length, then the bytes).
inline void broadcast_text(comm::Communicator& g, std::string& text, int root) {
  if (g.size() == 1) return;
  Tensor n = Tensor::empty({1}, DType::I32);
  n.data<int32_t>()[0] = static_cast<int32_t>(text.size());
  g.broadcast(n, root);
  const auto len = static_cast<size_t>(n.data<int32_t>()[0]);
  Tensor words = Tensor::empty({static_cast<int64_t>(len / 4 + 1)}, DType::I32);
  if (g.rank() == root) std::memcpy(words.raw(), text.data(), len);
  g.broadcast(words, root);
  text.assign(static_cast<const char*>(words.raw()), len);
}

}  // namespace parallm::parallel
