// `parallm export --format hf --ckpt RUN_DIR --out DIR [--latest]`: a run's
// checkpoint as a Hugging Face directory (hf/hf_model.h) that transformers'
// from_pretrained loads: GPT2LMHeadModel's config.json, model.safetensors and
// the tokenizer files when the run's vocabulary is BPE; LlamaForCausalLM's or
// Qwen3ForCausalLM's config.json and weights (fp32 or, with --dtype bf16,
// bf16), sharded past --max-shard-size with model.safetensors.index.json. The checkpoint is the one `parallm sample`
// takes (the best, ckpt/), or with --latest the newest intact one; the token table keeps the vocabulary's real tokens
// (a padded model.vocab_size is cut back). --out is new or empty, or with --overwrite an earlier export
// (train/checkpoint/hf_export.h).
#include "cli/commands.h"
#include "core/log.h"
#include "train/checkpoint/hf_export.h"

namespace parallm::cli {

Runner add_export(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Write a checkpoint in another format (hf: a Hugging Face GPT-2, Llama or Qwen3 directory)");
  struct Opts {
    std::string format = "hf", ckpt, out;
    train::HfExportOptions hf;
    std::string dtype = "fp32";
    int64_t shard_mb = 4096;
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
  cmd->add_option("--dtype", o->dtype, "Llama/Qwen3 weights: fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--max-shard-size", o->shard_mb, "Llama/Qwen3: MiB per safetensors file before a new shard")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  return [o]() {
    o->hf.write.bf16 = o->dtype == "bf16";
    o->hf.write.shard_bytes = o->shard_mb << 20;
    log::info("{}", train::export_run_hf(o->ckpt, o->out, o->hf));
    return 0;
  };
}

}  // namespace parallm::cli
