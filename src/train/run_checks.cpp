#include "train/run_checks.h"

#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "train/hf_gpt2.h"

namespace parallm::train {

namespace fs = std::filesystem;

data::Vocab dataset_vocabulary(RunConfig& cfg, const nlohmann::json* saved_config) {
  data::Vocab vocab = data::Vocab::load(cfg.data.dir);
  std::error_code ec;
  if (saved_config && fs::exists(fs::path(cfg.train.out_dir) / "meta.json", ec)) {
    const data::Vocab trained = data::Vocab::load(cfg.train.out_dir);
    const std::string saved_dir = saved_config->value("data.dir", std::string("?"));
    PARALLM_CHECK(vocab == trained, ConfigError, "config",
                  "data.dir={}: its vocabulary ({}) is not the one the run in {} was trained with ({}, in "
                  "{}/meta.json); resume on the run's dataset (data.dir={}), or start a new run in another "
                  "train.out_dir",
                  cfg.data.dir, vocab.describe(), cfg.train.out_dir, trained.describe(), cfg.train.out_dir, saved_dir);
  }
  if (!cfg.vocab_size_set) cfg.model.vocab_size = vocab.size();
  // Not set by the user: train.init_from=hf's config.json gave it (take_hf_model).
  PARALLM_CHECK(
      cfg.model.vocab_size >= vocab.size() || cfg.train.init_from != InitFrom::Hf || cfg.given("model.vocab_size"),
      ConfigError, "config",
      "train.init_from=hf:{}: its config.json's vocab_size ({}) is smaller than the dataset's vocabulary ({} "
      "in {}/meta.json): the model has no token rows for ids {} to {}; prepare the dataset with that "
      "model's tokenizer (parallm prepare gpt2 --vocab {} ...)",
      cfg.train.hf_dir, cfg.model.vocab_size, vocab.describe(), cfg.data.dir, cfg.model.vocab_size, vocab.size() - 1,
      cfg.train.hf_dir);
  PARALLM_CHECK(cfg.model.vocab_size >= vocab.size(), ConfigError, "config",
                "model.vocab_size={} is smaller than the dataset's vocabulary ({} in {}/meta.json): "
                "leave model.vocab_size unset (it then comes from the dataset) or set it to at least {}",
                cfg.model.vocab_size, vocab.describe(), cfg.data.dir, vocab.size());
  if (cfg.model.vocab_size > vocab.size())
    log::info("model.vocab_size={} pads the dataset's {}: ids {} to {} never occur in the data and are never sampled",
              cfg.model.vocab_size, vocab.describe(), vocab.size(), cfg.model.vocab_size - 1);
  return vocab;
}

void take_hf_model(RunConfig& cfg) {
  const std::string& dir = cfg.train.hf_dir;
  const model::GPTConfig hf = hf_gpt2_config(dir);
  model::GPTConfig& m = cfg.model;
  auto same = [&](const char* key, int64_t& mine, int64_t theirs) {
    PARALLM_CHECK(!cfg.given(key) || mine == theirs, ConfigError, "config",
                  "{}={}, but train.init_from=hf:{} holds a model with {}: leave {} out", key, mine, dir, theirs, key);
    mine = theirs;
  };
  same("model.n_layer", m.n_layer, hf.n_layer);
  same("model.n_head", m.n_head, hf.n_head);
  same("model.n_embd", m.n_embd, hf.n_embd);
  PARALLM_CHECK(!cfg.given("model.bias") || m.bias, ConfigError, "config",
                "model.bias=false, but train.init_from=hf:{} holds biases: leave model.bias out", dir);
  m.bias = true;
  PARALLM_CHECK(!cfg.given("model.gelu") || m.gelu == hf.gelu, ConfigError, "config",
                "model.gelu differs from the activation_function of hf:{}: leave model.gelu out", dir);
  m.gelu = hf.gelu;
  if (!cfg.given("model.block_size")) m.block_size = hf.block_size;
  PARALLM_CHECK(m.block_size <= hf.block_size, ConfigError, "config",
                "model.block_size={} is longer than hf:{}'s {} positions", m.block_size, dir, hf.block_size);
  if (!cfg.vocab_size_set) m.vocab_size = hf.vocab_size;
  cfg.vocab_size_set = true;
  PARALLM_CHECK(m.vocab_size >= hf.vocab_size, ConfigError, "config",
                "model.vocab_size={} is smaller than hf:{}'s {} tokens", m.vocab_size, dir, hf.vocab_size);
}

void check_hf_vocabulary(const RunConfig& cfg, const data::Vocab& vocab) {
  const std::string& dir = cfg.train.hf_dir;
  PARALLM_CHECK(vocab.is_bpe(), ConfigError, "config",
                "train.init_from=hf:{} is a BPE model, but data.dir={} holds {}: prepare the dataset with its "
                "tokenizer (parallm prepare gpt2 --vocab {} ...)",
                dir, cfg.data.dir, vocab.describe(), dir);
  const auto has = [&](const char* f) { return fs::exists(fs::path(dir) / f); };
  if (!has("tokenizer.json") && !has("vocab.json") && !has("encoder.json")) return;
  PARALLM_CHECK(data::Bpe::load_dir(dir) == *vocab.bpe(), ConfigError, "config",
                "data.dir={}: its tokenizer ({}) is not the one of train.init_from=hf:{}: prepare the dataset with "
                "it (parallm prepare gpt2 --vocab {} ...)",
                cfg.data.dir, vocab.describe(), dir, dir);
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
