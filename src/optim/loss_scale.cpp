#include "optim/loss_scale.h"

#include <cmath>

#include "core/error.h"

namespace parallm::optim {

bool is_loss_scale(double s) {
  if (!(s >= 1 && s <= LossScaler::kMaxScale)) return false;
  int e = 0;
  return std::frexp(s, &e) == 0.5;
}

LossScaler::LossScaler(const LossScaleConfig& cfg) : cfg_(cfg) {
  PARALLM_CHECK(cfg.mode == LossScaleMode::Off || is_loss_scale(cfg.scale), ConfigError, "loss_scale",
                "scale {} is not a power of two in [1, 2^64]", cfg.scale);
  st_.scale = cfg.mode == LossScaleMode::Off ? 1.0 : cfg.scale;
}

void LossScaler::set_state(const LossScaleState& s) {
  PARALLM_CHECK(dynamic(), InternalError, "loss_scale", "only a dynamic scale takes a saved state");
  PARALLM_CHECK(is_loss_scale(s.scale) && s.good_steps >= 0 && s.skipped >= 0, IoError, "loss_scale",
                "saved loss scale state (scale {}, {} good steps, {} skipped) is invalid", s.scale, s.good_steps,
                s.skipped);
  st_ = s;
}

bool LossScaler::update(double norm, int64_t iter) {
  if (std::isfinite(norm)) {
    if (dynamic() && ++st_.good_steps >= cfg_.window) {
      st_.good_steps = 0;
      if (st_.scale * 2 <= kMaxScale) st_.scale *= 2;
    }
    return true;
  }
  if (!dynamic())
    throw NumericError("train",
                       fmt::format("non-finite gradient norm ({}) at iter {}{}; lower "
                                   "optimizer.learning_rate or set optimizer.grad_clip",
                                   norm, iter, active() ? fmt::format(" with static loss scale {}", st_.scale) : ""));
  if (st_.scale <= 1)
    throw NumericError("train", fmt::format("non-finite gradient norm ({}) at iter {} even at loss scale 1: the "
                                            "gradients overflow at every scale, the run diverged; lower "
                                            "optimizer.learning_rate or set optimizer.grad_clip",
                                            norm, iter));
  st_.scale /= 2;
  st_.good_steps = 0;
  ++st_.skipped;
  return false;
}

}  // namespace parallm::optim
