// Learning-rate schedule: nanoGPT's linear warmup then cosine decay to min_lr.
#pragma once
#include <cstdint>

namespace parallm::optim {

struct LrSchedule {
  float learning_rate = 6e-4f;
  float min_lr = 6e-5f;
  int64_t warmup_iters = 0;
  int64_t lr_decay_iters = 0;
  bool decay_lr = true;
  float at(int64_t it) const;
};

}  // namespace parallm::optim
