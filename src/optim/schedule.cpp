#include "optim/schedule.h"

#include <cmath>

namespace parallm::optim {

float LrSchedule::at(int64_t it) const {
  if (!decay_lr) return learning_rate;
  if (it < warmup_iters) return learning_rate * static_cast<float>(it + 1) / static_cast<float>(warmup_iters + 1);
  if (it > lr_decay_iters || lr_decay_iters <= warmup_iters) return min_lr;
  double ratio = static_cast<double>(it - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
  double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return static_cast<float>(min_lr + coeff * (learning_rate - min_lr));
}

}  // namespace parallm::optim
