// `parallm sample --ckpt DIR --prompt TEXT [--max_new_tokens N] [--temperature T] [--top_k K]`
// The vocabulary is the run's own (the copy of meta.json the trainer keeps in
// the run directory; for runs made before it did, the run's data.dir), so a
// run directory alone is enough to sample from. --data names another
// dataset, which must have the same vocabulary. Text streams out as it is
// generated; a model whose vocab_size pads the vocabulary never draws a
// padding id. The checkpoint is the run's best one (ckpt/), or, when that is
// missing or damaged, its newest intact step-numbered one (train/ckpt_dirs.h).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "data/vocab.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/ckpt_dirs.h"
#include "train/config.h"
#include "train/sample.h"

namespace parallm::cli {

namespace {
constexpr int64_t kMaxNewTokens = 10'000'000;  // the whole sample is kept in memory (4 bytes a token)
}  // namespace

Runner add_sample(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  struct Opts {
    std::string ckpt, prompt = "\n", data;
    int64_t max_new_tokens = 500, top_k = 200, num_samples = 1;
    float temperature = 0.8f;
    uint64_t seed = 1337;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--ckpt", o->ckpt, "run directory (train.out_dir) holding ckpt/")->required();
  cmd->add_option("--prompt", o->prompt, "prompt text (default a newline)");
  cmd->add_option("--max_new_tokens", o->max_new_tokens, "tokens to generate")
      ->check(int_in(0, kMaxNewTokens))
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "sampling temperature (> 0)")
      ->check(number_in(0, 100, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--top_k", o->top_k, "keep the k most likely tokens (0 = all)")
      ->check(int_in(0, INT32_MAX))
      ->capture_default_str();
  cmd->add_option("--num_samples", o->num_samples, "how many samples")
      ->check(int_in(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--data", o->data, "dataset directory with meta.json (default: the run's own vocabulary)");
  return [o]() {
    train::ChooseOptions pick;
    pick.best_first = true;
    pick.params_only = true;
    auto meta = train::choose_checkpoint(o->ckpt, nullptr, pick);
    auto cfg = train::RunConfig::from_json(meta["config"]);
    const bool own = std::filesystem::exists(std::filesystem::path(o->ckpt) / "meta.json");
    auto vocab = data::CharVocab::load(!o->data.empty() ? o->data : own ? o->ckpt : cfg.data.dir);
    if (!o->data.empty() && own) {
      const auto trained = data::CharVocab::load(o->ckpt);
      PARALLM_CHECK(vocab == trained, ConfigError, "cli.sample",
                    "--data {}: its vocabulary ({} characters) is not the one run {} was trained with ({} "
                    "characters); leave --data out to use the run's own",
                    o->data, vocab.size(), o->ckpt, trained.size());
    }
    PARALLM_CHECK(vocab.size() <= cfg.model.vocab_size, ConfigError, "cli.sample",
                  "the vocabulary has {} characters but the model in {} only {} tokens: not the dataset it was "
                  "trained on",
                  vocab.size(), o->ckpt, cfg.model.vocab_size);
    model::GPT m(cfg.model, 1, cfg.model.block_size);
    train::load_checkpoint(train::checkpoint_of(meta), m, nullptr, /*verify=*/false);  // verified when chosen
    auto prompt = vocab.encode(o->prompt);
    // Each character is printed as it is drawn: a long sample shows itself growing.
    auto print_token = [&vocab](int32_t t) {
      std::fputs(vocab.decode({t}).c_str(), stdout);
      std::fflush(stdout);
    };
    for (int64_t s = 0; s < o->num_samples; ++s) {
      std::fputs(vocab.decode(prompt).c_str(), stdout);
      train::generate(
          m, prompt,
          {o->max_new_tokens, o->temperature, o->top_k, o->seed + static_cast<uint64_t>(s), vocab.size(), print_token});
      std::printf("\n---------------\n");
    }
    return 0;
  };
}

}  // namespace parallm::cli
