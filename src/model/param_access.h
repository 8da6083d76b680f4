// How a model reaches its parameters and gradients, group by group
// (ParamLayout groups: the embeddings, then one per block): its own flat
// buffers, or a sharded run's ParamStore (ZeRO, param_store.h) set on it.
// The passes ask for a group's parameters just before they read them and
// release them after, ask for its gradient buffer before they add to it and
// say when its gradients are final; that is the whole seam a sharded run
// plugs into, so the passes never know whether the weights are whole.
//
// With bf16 compute the access also keeps a bf16 copy of the fp32
// parameters, redrawn on first use after changed(): the GPU's bf16 passes
// read it, and the CPU's bf16 products take their weight operands from it.
// Without its own parameters (ZeRO stage 3) a group's part of the copy is
// drawn from the store's gathered group each time the group is asked for.
#pragma once
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/device_array.h"
#include "kernels/bf16.h"
#include "model/param_store.h"
#include "model/params.h"
#include "model/stage.h"

namespace parallm::model {

class ParamAccess {
 public:
  ParamAccess() = default;
  // Allocates what `storage` asks on `dev` (and the bf16 copy where `copy`).
  ParamAccess(const ParamLayout& layout, Device dev, GPTStorage storage, bool copy);
  // From now on groups are reached through `store` (nullptr: the own buffers again). Not owned.
  void set_store(ParamStore* store) { store_ = store; }

  float* params() const { return params_.data(); }  // the own flat buffers (null where not allocated)
  float* grads() const { return grads_.data(); }
  // Host copies in and out of the own flat buffers.
  void load(const float* host) {
    params_.copy_from_host(host, params_.size());
    changed();
  }
  void store(float* host) const { params_.copy_to_host(host, params_.size()); }
  void store_grads(float* host) const { grads_.copy_to_host(host, grads_.size()); }
  void zero_grads() {
    if (grads_.data()) grads_.zero();
  }
  // Parameters changed (the optimizer, a checkpoint, a broadcast): the bf16 copy is redrawn before its next use.
  void changed() { stale_ = true; }
  // The bf16 copy of the own parameters redrawn now if stale (before a CUDA graph that reads it is launched).
  void refresh_copy() {
    if (params_.data() && copy_.data()) refreshed_copy();
  }
  bool stored() const { return store_ != nullptr; }  // groups through a ZeRO store
  // The bf16 copy where it is current (an optimizer may then keep it current itself).
  bfloat16* current_copy() const { return !stale_ && params_.data() ? copy_.data() : nullptr; }

  // Group g's parameters for reading in `pass`, as fp32 (A = float) or the bf16 copy.
  template <class A>
  const A* params(int g, Pass pass) {
    if constexpr (std::is_same_v<A, float>)
      return group_params(g, pass);
    else
      return params_.data() ? refreshed_copy() + begin_[static_cast<size_t>(g)] : group_copy(g, pass);
  }
  void release(int g, Pass pass) const {
    if (store_) store_->release_params(g, pass);
  }
  float* grads(int g) const;
  void grads_done(int g) const {
    if (store_) store_->grads_done(g);
  }
  // CPU bf16 products with the own parameters: the scope under which the
  // kernels read weights from the copy (redrawn first if stale); none otherwise.
  std::optional<kernels::Bf16CopyScope> copy_scope(bool bf16_products);

 private:
  const float* group_params(int g, Pass pass) const;
  bfloat16* refreshed_copy();
  const bfloat16* group_copy(int g, Pass pass);  // the store's group g drawn into its part of the copy
  std::vector<int64_t> begin_, end_;             // each group's flat range
  int64_t total_ = 0;
  Device dev_ = Device::cpu();
  DeviceArray<float> params_, grads_;
  DeviceArray<bfloat16> copy_;
  bool stale_ = true;
  ParamStore* store_ = nullptr;
};

}  // namespace parallm::model
