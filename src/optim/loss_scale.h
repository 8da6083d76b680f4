// Loss scaling, for gradients kept in a narrow format (fp16 reaches only down
// to 6e-8): backward starts from the loss's gradient times a scale S, so small
// gradients stay representable, and the optimizer divides by S again.
//
// Dynamic scaling (the default for fp16, available for every dtype) finds the
// largest S that does not overflow: a step whose gradients are not finite is
// skipped (no update, the optimizer's step count unchanged) and S halves;
// after `window` finite steps in a row S doubles. S is always a power of two
// in [1, 2^64], so scaling and unscaling are exact: without an overflow, a
// scaled fp32 run makes bitwise the same updates as an unscaled one. Static
// scaling keeps one S and treats an overflow as divergence, as does no
// scaling. (train.loss_scale and its companions are parsed by RunConfig.)
//
// The decision depends only on whether the global gradient norm is finite;
// the trainer makes every rank see the same answer, so all skip alike.
#pragma once
#include <cstdint>

namespace parallm::optim {

enum class LossScaleMode { Off, Static, Dynamic };

struct LossScaleConfig {
  LossScaleMode mode = LossScaleMode::Off;
  double scale = 65536;   // the static scale, or the dynamic one's start
  int64_t window = 2000;  // dynamic: finite steps in a row before S doubles
};

// True for a power of two in [1, 2^64] (kMaxScale).
bool is_loss_scale(double s);

// What a checkpoint keeps (and every rank must agree on).
struct LossScaleState {
  double scale = 1;
  int64_t good_steps = 0;  // finite steps since the last change of S
  int64_t skipped = 0;     // steps skipped for overflow, over the whole run
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleConfig& cfg);
  bool active() const { return cfg_.mode != LossScaleMode::Off; }
  bool dynamic() const { return cfg_.mode == LossScaleMode::Dynamic; }
  // The factor backward starts from (1 when off).
  float scale() const { return static_cast<float>(st_.scale); }
  // After a step's gradients are reduced, with their global norm (of the
  // scaled gradients). Returns true when the optimizer should step. Dynamic:
  // false on a non-finite norm, and S halves; NumericError when S would drop
  // below 1 (the gradients are not finite at any scale: the run diverged).
  // Off or static: a non-finite norm is a NumericError naming the iteration.
  bool update(double norm, int64_t iter);
  const LossScaleState& state() const { return st_; }
  // A resumed dynamic run's saved state (IoError if it is not one S could
  // reach); only for a dynamic scaler.
  void set_state(const LossScaleState& s);
  // 2^64: the optimizer's factor (clip factor)/S stays a normal fp32 number
  // (for clip factors above 2^-62), so unscaling stays exact. fp16 gradients
  // never come near it; fp32 ones may grow there, harmlessly.
  static constexpr double kMaxScale = 18446744073709551616.0;

 private:
  LossScaleConfig cfg_;
  LossScaleState st_;
};

}  // namespace parallm::optim
