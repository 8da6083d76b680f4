// Checks a run makes before anything of it is written: the dataset's
// vocabulary against the model and (on resume) against the run's own, and
// whether a resumed run has anything left to do.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "data/vocab.h"
#include "train/config.h"

namespace parallm::train {

// data.dir's character vocabulary (strict: data/vocab.h). Sets
// model.vocab_size from it when the config does not; a model.vocab_size
// smaller than the dataset's is a ConfigError, a larger one pads (those ids
// never occur in the data and are never sampled). On resume (`saved_config`
// not null) the run's own copy of meta.json in train.out_dir, where it has
// one, must hold the same vocabulary: a ConfigError naming both otherwise.
data::CharVocab dataset_vocabulary(RunConfig& cfg, const nlohmann::json* saved_config);

// For a resumed run whose checkpoint resumes at iteration `ckpt_iter`: "" if
// it has iterations left (ckpt_iter <= train.max_iters, the last one), else
// the sentence saying it is done (an eval-only run always has some).
std::string nothing_left(const RunConfig& cfg, int64_t ckpt_iter);

}  // namespace parallm::train
