// `parallm sample --ckpt DIR --prompt TEXT [--max_new_tokens N] [--temperature T] [--top_k K]`
// The vocabulary is the run's own (the copy of meta.json the trainer keeps in
// the run directory; for runs made before it did, the run's data.dir), so a
// run directory alone is enough to sample from. --data names another
// dataset, which must have the same vocabulary. Text streams out as it is
// generated; a model whose vocab_size pads the vocabulary never draws a
// padding id. The checkpoint is the run's best one (ckpt/), or, when that is
// missing or damaged, its newest intact step-numbered one (train/checkpoint/ckpt_dirs.h).
// --ckpt hf:DIR samples a Hugging Face GPT-2 directory instead (its weights
// and tokenizer, hf/hf_gpt2.h); --logits FILE writes the prompt's logits
// instead of sampling (what tools/torch_ref/hf_logits.py compares).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/log.h"
#include "data/vocab.h"
#include "hf/hf_model.h"
#include "model/gpt.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/ckpt_dirs.h"
#include "train/config/config.h"
#include "train/loop/sample.h"

namespace parallm::cli {

namespace {

constexpr int64_t kMaxNewTokens = 10'000'000;  // the whole sample is kept in memory (4 bytes a token)

struct SampleOpts {
  std::string ckpt, prompt = "\n", data, logits;
  int64_t max_new_tokens = 500, top_k = 200, num_samples = 1;
  float temperature = 0.8f;
  uint64_t seed = 1337;
  bool no_kv_cache = false;
};

struct Loaded {
  std::unique_ptr<model::GPT> model;
  data::Vocab vocab;
};

// A run directory's checkpoint and vocabulary.
Loaded load_run(const SampleOpts& o) {
  train::ChooseOptions pick;
  pick.best_first = true;
  pick.params_only = true;
  auto meta = train::choose_checkpoint(o.ckpt, nullptr, pick);
  auto cfg = train::RunConfig::from_json(meta["config"]);
  const bool own = std::filesystem::exists(std::filesystem::path(o.ckpt) / "meta.json");
  Loaded l;
  l.vocab = data::Vocab::load(!o.data.empty() ? o.data : own ? o.ckpt : cfg.data.dir);
  if (!o.data.empty() && own) {
    const auto trained = data::Vocab::load(o.ckpt);
    PARALLM_CHECK(l.vocab == trained, ConfigError, "cli.sample",
                  "--data {}: its vocabulary ({}) is not the one run {} was trained with ({}); leave --data "
                  "out to use the run's own",
                  o.data, l.vocab.describe(), o.ckpt, trained.describe());
  }
  l.model = std::make_unique<model::GPT>(cfg.model, 1, cfg.model.block_size);
  train::load_checkpoint(train::checkpoint_of(meta), *l.model, nullptr, /*verify=*/false);  // verified when chosen
  return l;
}

// hf:DIR, a Hugging Face directory (hf/hf_model.h: GPT-2, Llama, Qwen): its weights and
// its tokenizer files (or --data's vocabulary).
Loaded load_hf(const SampleOpts& o) {
  const std::string dir = o.ckpt.substr(3);
  const model::GPTConfig cfg = hf::hf_config(dir);
  PARALLM_CHECK(!o.data.empty() || data::Bpe::dir_has_tokenizer(dir), ConfigError, "cli.sample",
                "--ckpt hf:{} holds no tokenizer (tokenizer.json, vocab.json + merges.txt, or encoder.json + "
                "vocab.bpe), as a character model's export does: name its vocabulary with --data DIR (the dataset, "
                "or the run directory, holding meta.json)",
                dir);
  Loaded l;
  l.vocab = !o.data.empty() ? data::Vocab::load(o.data)
                            : data::Vocab::of_bpe(std::make_shared<const data::Bpe>(data::Bpe::load_dir(dir)));
  l.model = std::make_unique<model::GPT>(cfg, 1, cfg.block_size);
  l.model->load_params(hf::load_hf(dir, cfg, l.model->layout()).data());
  return l;
}

// The logits of every position of the prompt, [T, vocab_size] float32, to `path`.
int write_logits(model::GPT& m, const std::vector<int32_t>& prompt, const std::string& path) {
  const auto T = static_cast<int64_t>(prompt.size());
  PARALLM_CHECK(T > 0 && T <= m.config().block_size && T % m.token_multiple() == 0, ConfigError, "cli.sample",
                "--logits: the prompt is {} tokens; it must be 1 to {} (model.block_size)", T, m.config().block_size);
  const auto V = m.config().vocab_size;
  std::vector<float> out(static_cast<size_t>(T * V));
  m.forward(prompt.data(), nullptr, 1, T, model::StepContext{});
  for (int64_t pos = 0; pos < T; ++pos) m.last_logits(out.data() + pos * V, 1, T, pos);
  write_file(path, {{out.data(), out.size() * sizeof(float)}});
  std::printf("wrote the logits of %lld positions x %lld tokens to %s\n", static_cast<long long>(T),
              static_cast<long long>(V), path.c_str());
  return 0;
}

}  // namespace

Runner add_sample(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  auto o = std::make_shared<SampleOpts>();
  cmd->add_option("--ckpt", o->ckpt,
                  "run directory (train.out_dir) holding ckpt/, or hf:DIR (a Hugging Face GPT-2 directory)")
      ->required();
  cmd->add_option("--prompt", o->prompt,
                  "prompt text (default a newline; an empty one is a newline too, as in "
                  "train.sample_prompt)");
  cmd->add_option("--max_new_tokens", o->max_new_tokens, "tokens to generate")
      ->check(int_in(0, kMaxNewTokens))
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "sampling temperature (0: always the most likely token)")
      ->check(number_in(0, 100))
      ->capture_default_str();
  cmd->add_option("--top_k", o->top_k, "keep the k most likely tokens (0 = all)")
      ->check(int_in(0, INT32_MAX))
      ->capture_default_str();
  cmd->add_option("--num_samples", o->num_samples, "how many samples")
      ->check(int_in(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed (as train.seed)")
      ->check(int_in(0, INT64_MAX))
      ->capture_default_str();
  cmd->add_flag("--no-kv-cache", o->no_kv_cache,
                "run the whole context for every token instead of caching keys and values (the same ids, slower)");
  cmd->add_option("--data", o->data, "dataset directory with meta.json (default: the run's own vocabulary)");
  cmd->add_option("--logits", o->logits,
                  "write the prompt's logits (every position, float32 little-endian, [tokens, vocab_size]) to this "
                  "file instead of sampling");
  return [o]() {
    if (o->prompt.empty()) {  // as train.sample_prompt: the samples start from a newline
      log::info("--prompt is empty: sampling from a newline (the default prompt), as train.sample_prompt does");
      o->prompt = "\n";
    }
    Loaded l = o->ckpt.rfind("hf:", 0) == 0 ? load_hf(*o) : load_run(*o);
    model::GPT& m = *l.model;
    const data::Vocab& vocab = l.vocab;
    PARALLM_CHECK(vocab.size() <= m.config().vocab_size, ConfigError, "cli.sample",
                  "the vocabulary has {} but the model in {} only {} tokens: not the dataset it was trained on",
                  vocab.describe(), o->ckpt, m.config().vocab_size);
    if (!o->logits.empty()) return write_logits(m, vocab.encode(o->prompt), o->logits);
    auto prompt = vocab.encode(o->prompt);
    // Each character is printed as it is drawn: a long sample shows itself growing.
    auto print_token = [&vocab](int32_t t) {
      std::fputs(vocab.decode({t}).c_str(), stdout);
      std::fflush(stdout);
    };
    for (int64_t s = 0; s < o->num_samples; ++s) {
      std::fputs(vocab.decode(prompt).c_str(), stdout);
      train::SampleOptions so{o->max_new_tokens, o->temperature, o->top_k, o->seed + static_cast<uint64_t>(s),
                              vocab.size(),      print_token};
      so.kv_cache = !o->no_kv_cache;
      const auto t0 = std::chrono::steady_clock::now();
      train::generate(m, prompt, so);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // On stderr: stdout is the sample's text alone.
      fmt::print(stderr, "{} tokens in {:.3f} s ({:.1f} tokens/s, {})\n", o->max_new_tokens, secs,
                 static_cast<double>(o->max_new_tokens) / secs,
                 so.kv_cache && m.decode_supported() ? "KV cache" : "recomputed");
      std::printf("\n---------------\n");
    }
    return 0;
  };
}

}  // namespace parallm::cli
