// AdamW over the model's flat parameter buffer, as nanoGPT configures it:
// weight decay on 2-D tensors (matmul weights and embeddings) only. The
// layout's slots are merged into a few contiguous runs of equal decay, so a
// step is a handful of fused vectorized passes. Moments live in two flat
// buffers accounted as optimizer state, on the device of the parameters.
#pragma once
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/device_array.h"
#include "kernels/adamw.h"
#include "model/params.h"

namespace parallm::optim {

// lr, beta1, beta2, eps, weight_decay: one declaration with its defaults, in
// kernels/adamw.h. The learning rate of a step is step()'s argument (the
// schedule's); lr here is the configured peak.
using AdamWConfig = kernels::AdamWHyperparams;

class AdamW {
 public:
  // The whole model: one state element per flat-buffer element.
  AdamW(const model::ParamLayout& layout, const AdamWConfig& cfg, Device dev = Device::cpu());
  // A shard (ZeRO): moments for state_size elements, reached through `runs`.
  // `cat`: where the moments are accounted (MemCategory::Offloaded for ZeRO offload).
  AdamW(std::vector<model::UpdateRun> runs, int64_t state_size, const AdamWConfig& cfg, Device dev = Device::cpu(),
        MemCategory cat = MemCategory::OptState);
  // One update with learning rate `lr`; gradients are multiplied by grad_scale first.
  // params and grads live on the optimizer's device; the runs' offsets apply to them.
  // params_bf16 (optional, the runs' offsets apply to it too): receives the
  // updated weights rounded to bf16 in the same pass (GPT::weight_copy_for_step).
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f, bfloat16* params_bf16 = nullptr);
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  float* m() const { return m_.data(); }  // on device()
  float* v() const { return v_.data(); }
  Device device() const { return m_.device(); }
  int64_t size() const { return static_cast<int64_t>(m_.size()); }
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  std::vector<model::UpdateRun> runs_;
  DeviceArray<float> m_, v_;
  int64_t t_ = 0;
};

// Global L2 norm of a flat gradient buffer (double accumulation, fixed order).
double global_norm(const float* grads, int64_t n, Device dev = Device::cpu());
// torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6)); 1 if max_norm <= 0.
float clip_factor(double norm, float max_norm);

}  // namespace parallm::optim
