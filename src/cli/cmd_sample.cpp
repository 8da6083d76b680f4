// `parallm sample --ckpt DIR --prompt TEXT [--max_new_tokens N] [--temperature T] [--top_k K]`
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "data/vocab.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/sample.h"

namespace parallm::cli {

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
  cmd->add_option("--max_new_tokens", o->max_new_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", o->temperature, "sampling temperature (> 0)")->check(CLI::PositiveNumber);
  cmd->add_option("--top_k", o->top_k, "keep the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--num_samples", o->num_samples, "how many samples")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", o->seed, "sampling seed");
  cmd->add_option("--data", o->data, "dataset directory with meta.json (default: the run's data.dir)");
  return [o]() {
    auto meta = train::read_checkpoint_meta(o->ckpt);
    auto cfg = train::RunConfig::from_json(meta["config"]);
    auto vocab = data::CharVocab::load(o->data.empty() ? cfg.data_dir : o->data);
    model::GPT m(cfg.model, 1, cfg.model.block_size);
    train::load_checkpoint(o->ckpt, m, nullptr);
    auto prompt = vocab.encode(o->prompt);
    for (int64_t s = 0; s < o->num_samples; ++s) {
      auto out =
          train::generate(m, prompt, {o->max_new_tokens, o->temperature, o->top_k, o->seed + static_cast<uint64_t>(s)});
      std::printf("%s\n---------------\n", vocab.decode(out).c_str());
    }
    return 0;
  };
}

}  // namespace parallm::cli
