// Checkpoints: a directory <out_dir>/ckpt holding
//   model.bin  the flat parameter buffer (fp32)
//   optim.bin  AdamW first then second moments (fp32, same layout)
//   state.json format version, iteration, best val loss, optimizer step count,
//              the resolved config, the parameter table (names, shapes,
//              offsets) and each file's size, checked on load.
// Saving is atomic: everything is written into a fresh sibling directory,
// flushed, then swapped in by rename, so a crash at any point leaves either
// the old or the new checkpoint, never a mix. Data order and dropout masks are
// pure functions of (seed, step), so (weights, moments, step) is the whole
// state: a resumed run continues the identical trajectory.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/gpt.h"
#include "optim/adamw.h"

namespace parallm::train {

struct TrainState {
  int64_t iter = 0;  // next iteration to run
  double best_val_loss = 1e30;
};

void save_checkpoint(const std::string& out_dir, const model::GPT& m, const optim::AdamW& opt, const TrainState& st,
                     const nlohmann::json& config);
// The same from host buffers of layout.total() floats each (a sharded run
// assembles them first): parameters, then AdamW's first and second moments.
void save_checkpoint(const std::string& out_dir, const model::ParamLayout& layout, const float* params, const float* m,
                     const float* v, int64_t optimizer_steps, const TrainState& st, const nlohmann::json& config);
// Reads state.json only (to rebuild the model with the saved config).
nlohmann::json read_checkpoint_meta(const std::string& out_dir);
// Loads weights and optimizer state into an existing model/optimizer; throws
// IoError naming the mismatch if the layout differs or a file is truncated.
TrainState load_checkpoint(const std::string& out_dir, model::GPT& m, optim::AdamW* opt);
// Into host buffers of layout.total() floats (m and v may both be null).
TrainState load_checkpoint(const std::string& out_dir, const model::ParamLayout& layout, float* params, float* m,
                           float* v, int64_t* optimizer_steps);

}  // namespace parallm::train
