// What a run tells its user: the lines at start (model, world and mesh,
// batch, strategy, device, loss scaling, MFU peak), each step's metrics
// record and log line (built from the step's result and the gradient sync's
// statistics), and the memory report after the first step.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "train/loop/step.h"
#include "train/session.h"

namespace parallm::train {

void log_run(const Session& s);
// The train record of iteration `it` and its log line (every log_interval).
void record_step(const Session& s, int64_t it, float lr, const StepResult& r);
// Peak memory by category, the state per parameter, and the strategy's notes.
void report_memory(const Session& s, int64_t it);

}  // namespace parallm::train
