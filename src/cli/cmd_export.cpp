// `parallm export --format hf --ckpt RUN_DIR --out DIR [--latest]`: a run's
// checkpoint as a Hugging Face GPT-2 directory (hf/hf_gpt2.h) that
// transformers' GPT2LMHeadModel.from_pretrained loads: config.json,
// model.safetensors, and the tokenizer files when the run's vocabulary is
// BPE. The checkpoint is the one `parallm sample` takes (the best, ckpt/), or
// with --latest the newest intact one; the token table keeps the
// vocabulary's real tokens (a padded model.vocab_size is cut back). --out is
// new or empty, or with --overwrite an earlier export (train/checkpoint/hf_export.h).
#include "cli/commands.h"
#include "core/log.h"
#include "train/checkpoint/hf_export.h"

namespace parallm::cli {

Runner add_export(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a checkpoint in another format (hf: a Hugging Face GPT-2 directory)");
  struct Opts {
    std::string format = "hf", ckpt, out;
    train::HfExportOptions hf;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--format", o->format, "hf: config.json + model.safetensors (+ tokenizer files)")
      ->check(CLI::IsMember({"hf"}))
      ->capture_default_str();
  cmd->add_option("--ckpt", o->ckpt, "run directory (train.out_dir)")->required();
  cmd->add_option("--out", o->out, "directory to write: new or empty (or an earlier export, with --overwrite)")
      ->required();
  cmd->add_flag("--latest", o->hf.latest, "the newest intact checkpoint instead of the best (ckpt/)");
  cmd->add_flag("--overwrite", o->hf.overwrite,
                "replace an earlier export in --out (its files this export does not write are removed)");
  return [o]() {
    log::info("{}", train::export_run_hf(o->ckpt, o->out, o->hf));
    return 0;
  };
}

}  // namespace parallm::cli
