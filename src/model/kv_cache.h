// Generation with a KV cache: each layer's keys and values of the positions
// already run, so a decode pass runs the model on the new tokens alone. The
// model's passes are unchanged but for attention: with a cache in the pass
// (PassShape::cache), a layer appends its new rows' keys and values (after
// RoPE; each query head's, as the attention kernel reads them) and attends
// the new queries to every cached position with the block kernel of context
// parallelism (attention.h's AttnBlock: queries at positions start.. against
// keys 0..), the same causal softmax recomputation does. Positions enter the
// pass through its first position (PassShape::pos0: learned positions' rows,
// the rotary table's rows).
//
// A cache serves one sequence (batch 1) of up to the model's block_size
// positions, on the whole model of one rank in fp32 activations (the block
// kernels' type); GPT::decode_supported() says whether a model can use one.
#pragma once
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/device_array.h"
#include "model/config.h"

namespace parallm::kernels {
template <class A>
struct ModelOps;
}  // namespace parallm::kernels

namespace parallm::model {

class KvCache {
 public:
  KvCache() = default;
  // For a model of `cfg` on `dev`, up to cfg.block_size positions.
  KvCache(const GPTConfig& cfg, Device dev, int threads);
  int64_t length() const { return len_; }  // positions held
  int64_t capacity() const { return cap_; }
  void clear() { len_ = 0; }
  // Layer l's attention of a pass of n new rows at positions [len, len + n):
  // appends their keys and values from qkv [n, 3A] and writes out [n, A] and
  // lse [H, n]. Called by every layer of a pass; commit() then takes the rows.
  void attend(const kernels::ModelOps<float>& k, int64_t l, float* out, float* lse, const float* qkv, int64_t n);
  void commit(int64_t n) { len_ += n; }

 private:
  int64_t cap_ = 0, len_ = 0, H_ = 0, D_ = 0;
  std::vector<DeviceArray<float>> k_, v_;  // per layer [cap, H D]
  DeviceArray<float> ws_;
};

}  // namespace parallm::model
