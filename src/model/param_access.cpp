// The model's parameter access (param_access.h): its own buffers or the store's groups.
#include "model/param_access.h"

#include "core/error.h"
#include "core/profiler.h"

namespace parallm::model {

ParamAccess::ParamAccess(const ParamLayout& layout, Device dev, GPTStorage storage, bool copy)
    : total_(layout.total()), dev_(dev) {
  for (int g = 0; g < layout.num_groups(); ++g) {
    begin_.push_back(layout.group(g).begin);
    end_.push_back(layout.group(g).end);
  }
  if (storage.params) params_ = DeviceArray<float>(total_, MemCategory::Params, dev);
  if (storage.grads) grads_ = DeviceArray<float>(total_, MemCategory::Grads, dev);
  if (copy) copy_ = DeviceArray<bfloat16>(total_, MemCategory::Params, dev);
}

const float* ParamAccess::group_params(int g, Pass pass) const {
  if (store_) return store_->params(g, pass);
  PARALLM_CHECK(params_.data(), InternalError, "gpt", "the model holds no parameters and has no store");
  return params_.data() + begin_[static_cast<size_t>(g)];
}

float* ParamAccess::grads(int g) const {
  if (store_) return store_->grads(g);
  PARALLM_CHECK(grads_.data(), InternalError, "gpt", "the model holds no gradients and has no store");
  return grads_.data() + begin_[static_cast<size_t>(g)];
}

bfloat16* ParamAccess::refreshed_copy() {
  if (stale_) {
    PARALLM_CHECK(params_.data(), InternalError, "gpt", "bf16 compute weights need the fp32 parameters");
    kernels::convert_to_bf16(dev_, copy_.data(), params_.data(), total_);
    stale_ = false;
  }
  return copy_.data();
}

const bfloat16* ParamAccess::group_copy(int g, Pass pass) {
  PARALLM_CHECK(store_ && copy_.data(), InternalError, "gpt", "bf16 compute weights need the fp32 parameters");
  const auto i = static_cast<size_t>(g);
  bfloat16* out = copy_.data() + begin_[i];
  kernels::convert_to_bf16(dev_, out, store_->params(g, pass), end_[i] - begin_[i]);
  return out;
}

std::optional<kernels::Bf16CopyScope> ParamAccess::copy_scope(bool bf16_products) {
  if (!bf16_products || !copy_.data()) return std::nullopt;
  if (stale_) {
    PARALLM_PROFILE("to_bf16");
    kernels::convert_to_bf16(dev_, copy_.data(), params_.data(), total_);
    stale_ = false;
  }
  return std::optional<kernels::Bf16CopyScope>(std::in_place, params_.data(), copy_.data(), total_);
}

}  // namespace parallm::model
