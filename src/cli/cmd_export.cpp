// `parallm export --format hf --ckpt RUN_DIR --out DIR [--latest]`: a run's
// checkpoint as a Hugging Face GPT-2 directory (train/hf_gpt2.h) that
// transformers' GPT2LMHeadModel.from_pretrained loads: config.json,
// model.safetensors, and the tokenizer files when the run's vocabulary is
// BPE. The checkpoint is the one `parallm sample` takes (the best, ckpt/), or
// with --latest the newest intact one; the token table keeps the
// vocabulary's real tokens (a padded model.vocab_size is cut back).
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/vocab.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/ckpt_dirs.h"
#include "train/config.h"
#include "train/hf_gpt2.h"

namespace parallm::cli {

Runner add_export(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a checkpoint in another format (hf: a Hugging Face GPT-2 directory)");
  struct Opts {
    std::string format = "hf", ckpt, out;
    bool latest = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--format", o->format, "hf: config.json + model.safetensors (+ tokenizer files)")
      ->check(CLI::IsMember({"hf"}))
      ->capture_default_str();
  cmd->add_option("--ckpt", o->ckpt, "run directory (train.out_dir)")->required();
  cmd->add_option("--out", o->out, "directory to write")->required();
  cmd->add_flag("--latest", o->latest, "the newest intact checkpoint instead of the best (ckpt/)");
  return [o]() {
    namespace fs = std::filesystem;
    train::ChooseOptions pick;
    pick.best_first = !o->latest;
    pick.params_only = true;
    const auto meta = train::choose_checkpoint(o->ckpt, nullptr, pick);
    const auto cfg = train::RunConfig::from_json(meta["config"]);
    const bool own = fs::exists(fs::path(o->ckpt) / "meta.json");
    const data::Vocab vocab = data::Vocab::load(own ? o->ckpt : cfg.data.dir);
    PARALLM_CHECK(vocab.size() <= cfg.model.vocab_size, ConfigError, "cli.export",
                  "the run's vocabulary has {} but its model only {} tokens", vocab.describe(), cfg.model.vocab_size);
    model::GPT m(cfg.model, 1, 1);
    train::load_checkpoint(train::checkpoint_of(meta), m, nullptr, /*verify=*/false);  // verified when chosen
    std::vector<float> params(static_cast<size_t>(m.flat_size()));
    m.store_params(params.data());
    train::export_hf_gpt2(o->out, cfg.model, m.layout(), params.data(), vocab.size(), vocab.bpe());
    log::info("exported {} (iteration {}, {}) to {}: config.json, model.safetensors{}", meta["_dir"].get<std::string>(),
              meta["iter"].get<int64_t>(), cfg.model.summary(), o->out,
              vocab.is_bpe() ? ", vocab.json, merges.txt, tokenizer_config.json"
                             : " (a character vocabulary: no tokenizer files)");
    return 0;
  };
}

}  // namespace parallm::cli
