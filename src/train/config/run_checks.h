// Checks a run makes before anything of it is written: the dataset's
// vocabulary against the model and (on resume) against the run's own, and
// whether a resumed run has anything left to do.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "data/vocab.h"
#include "parallel/mesh.h"
#include "train/config/config.h"

namespace parallm::train {

// data.dir's character vocabulary (strict: data/vocab.h). Sets
// model.vocab_size from it when the config does not; a model.vocab_size
// smaller than the dataset's is a ConfigError, a larger one pads (those ids
// never occur in the data and are never sampled). On resume (`saved_config`
// not null) the run's own copy of meta.json in train.out_dir, where it has
// one, must hold the same vocabulary: a ConfigError naming both otherwise.
data::Vocab dataset_vocabulary(RunConfig& cfg, const nlohmann::json* saved_config);

// train.init_from=hf:DIR: the model.* keys from DIR/config.json (n_layer,
// n_head, n_embd, bias, gelu; block_size and vocab_size unless given: a
// smaller block_size crops the position table, a larger vocab_size pads the
// token table). A given key that contradicts the directory is a ConfigError
// naming both values.
void take_hf_model(RunConfig& cfg);
// With train.init_from=hf:DIR, the dataset's vocabulary must be BPE, and the
// one DIR's tokenizer files hold where it has some (ConfigError otherwise).
void check_hf_vocabulary(const RunConfig& cfg, const data::Vocab& vocab);

// For a resumed run whose checkpoint resumes at iteration `ckpt_iter`: "" if
// it has iterations left (ckpt_iter <= train.max_iters, the last one), else
// the sentence saying it is done (an eval-only run always has some).
std::string nothing_left(const RunConfig& cfg, int64_t ckpt_iter);

// What a checkpoint records of the layout that saved it (TrainState::layout):
// the degrees `d` (resolved), the world and the sequences an iteration.
nlohmann::json layout_record(const RunConfig& cfg, const parallel::MeshDims& d);

// A resumed run's layout: the layout keys `asked` gives, the checkpoint's for
// the others (`cfg`, from RunConfig::resumed_from), parallel.dp derived from
// the job's `world` ranks. When `asked` gives none and the checkpoint's
// degrees do not fit the job (another world size), every layout key takes its
// default: data parallelism over every rank. A layout that does not fit the
// job is a ConfigError naming the keys taken from the checkpoint. Returns what
// the lead rank says (nothing when the layout is the checkpoint's): the
// layout, the checkpoint's (`saved`: its TrainState::layout, null when not
// recorded), and the global batch when it changes (then, or when the
// checkpoint's layout did not fit, as a warning).
struct LayoutNote {
  std::string text;
  bool warn = false;
};
LayoutNote fit_resumed_layout(RunConfig& cfg, const RunConfig& asked, const nlohmann::json& saved, int world);

}  // namespace parallm::train
