#include "optim/adamw.h"

#include <cmath>

#include "core/error.h"
#include "kernels/adamw.h"
#include "kernels/ops.h"

namespace parallm::optim {

AdamW::AdamW(const model::ParamLayout& layout, const AdamWConfig& cfg, Device dev)
    : cfg_(cfg), m_(layout.total(), MemCategory::OptState, dev), v_(layout.total(), MemCategory::OptState, dev) {
  for (const auto& s : layout.slots()) {
    // Padding between slots stays zero (zero grads, zero params), so runs may span it.
    if (!runs_.empty() && runs_.back().decay == s.decay) {
      runs_.back().length = s.offset + s.numel - runs_.back().param;
    } else {
      runs_.push_back({s.offset, s.offset, s.offset, s.numel, s.decay});
    }
  }
}

AdamW::AdamW(std::vector<model::UpdateRun> runs, int64_t state_size, const AdamWConfig& cfg, Device dev,
             MemCategory cat)
    : cfg_(cfg), runs_(std::move(runs)), m_(state_size, cat, dev), v_(state_size, cat, dev) {
  for (const auto& r : runs_)
    PARALLM_CHECK(r.state >= 0 && r.length >= 0 && r.state + r.length <= state_size, InternalError, "optim.adamw",
                  "run [{}, {}) outside the state of {} elements", r.state, r.state + r.length, state_size);
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale, bfloat16* params_bf16) {
  ++t_;
  kernels::AdamWParams p;
  static_cast<kernels::AdamWHyperparams&>(p) = cfg_;  // weight_decay applies to the runs with decay set
  p.lr = lr;
  p.step = t_;
  p.grad_scale = grad_scale;
  kernels::ops_for(m_.device())
      .adamw_runs(params, grads, m_.data(), v_.data(), runs_.data(), static_cast<int64_t>(runs_.size()), p,
                  params_bf16);
}

double global_norm(const float* grads, int64_t n, Device dev) {
  return std::sqrt(kernels::ops_for(dev).sum_squares(grads, n));
}

float clip_factor(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  double f = static_cast<double>(max_norm) / (norm + 1e-6);
  return f < 1.0 ? static_cast<float>(f) : 1.0f;
}

}  // namespace parallm::optim
