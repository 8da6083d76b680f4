// Evaluation at an iteration: the mean loss of train.eval_iters fixed
// batches of each split (the same batches every time), its record and log
// line, the checkpoint it may trigger (on improvement, always, or the last
// iteration of a run that saved nothing yet) and a sample from the model.
#pragma once
#include <cstdint>

#include "train/session.h"

namespace parallm::train {

struct EvalResult {
  float train_loss = 0, val_loss = 0;
};

EvalResult evaluate(Session& s, int64_t it, float lr);

}  // namespace parallm::train
