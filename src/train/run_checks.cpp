#include "train/run_checks.h"

#include <filesystem>

#include "core/error.h"
#include "core/log.h"

namespace parallm::train {

namespace fs = std::filesystem;

data::CharVocab dataset_vocabulary(RunConfig& cfg, const nlohmann::json* saved_config) {
  data::CharVocab vocab = data::CharVocab::load(cfg.data.dir);
  std::error_code ec;
  if (saved_config && fs::exists(fs::path(cfg.train.out_dir) / "meta.json", ec)) {
    const data::CharVocab trained = data::CharVocab::load(cfg.train.out_dir);
    const std::string saved_dir = saved_config->value("data.dir", std::string("?"));
    PARALLM_CHECK(vocab == trained, ConfigError, "config",
                  "data.dir={}: its vocabulary ({} characters) is not the one the run in {} was trained with ({} "
                  "characters, in {}/meta.json); resume on the run's dataset (data.dir={}), or start a new run in "
                  "another train.out_dir",
                  cfg.data.dir, vocab.size(), cfg.train.out_dir, trained.size(), cfg.train.out_dir, saved_dir);
  }
  if (!cfg.vocab_size_set) cfg.model.vocab_size = vocab.size();
  PARALLM_CHECK(cfg.model.vocab_size >= vocab.size(), ConfigError, "config",
                "model.vocab_size={} is smaller than the dataset's vocabulary ({} characters in {}/meta.json): "
                "leave model.vocab_size unset (it then comes from the dataset) or set it to at least {}",
                cfg.model.vocab_size, vocab.size(), cfg.data.dir, vocab.size());
  if (cfg.model.vocab_size > vocab.size())
    log::info(
        "model.vocab_size={} pads the dataset's {} characters: ids {} to {} never occur in the data and are "
        "never sampled",
        cfg.model.vocab_size, vocab.size(), vocab.size(), cfg.model.vocab_size - 1);
  return vocab;
}

std::string nothing_left(const RunConfig& cfg, int64_t ckpt_iter) {
  // A checkpoint holds the state before iteration ckpt_iter; train.max_iters is the last one trained.
  if (cfg.train.eval_only || ckpt_iter <= cfg.train.max_iters) return "";
  return fmt::format(
      "nothing to do: the checkpoint in {} resumes at iteration {}, past the last one, train.max_iters={}; the run "
      "is left as it is (raise train.max_iters to train further)",
      cfg.train.out_dir, ckpt_iter, cfg.train.max_iters);
}

}  // namespace parallm::train
