#include "train/checkpoint/hf_export.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "core/error.h"
#include "data/vocab.h"
#include "hf/hf_model.h"
#include "model/gpt.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/ckpt_dirs.h"
#include "train/config/config.h"

namespace parallm::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWhere = "export";

// The files of a Hugging Face model directory an export makes or replaces.
const std::set<std::string>& export_files() {
  static const std::set<std::string> f = {"config.json",
                                          "model.safetensors",
                                          "model.safetensors.index.json",
                                          "pytorch_model.bin",
                                          "generation_config.json",
                                          "vocab.json",
                                          "merges.txt",
                                          "tokenizer.json",
                                          "tokenizer_config.json",
                                          "special_tokens_map.json",
                                          "added_tokens.json"};
  return f;
}

// An export's file: one of export_files() or a weight shard (model-00001-of-00003.safetensors).
bool is_export_file(const std::string& name) {
  if (export_files().count(name)) return true;
  const std::string_view n = name;
  return n.size() == 37 && n.substr(0, 6) == "model-" && n.substr(11, 4) == "-of-" && n.substr(20) == ".safetensors";
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += fmt::format(" and {} more", names.size() - shown);
  return s;
}

}  // namespace

std::string prepare_export_dir(const std::string& out, bool overwrite, bool bpe) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return "";
  PARALLM_CHECK(fs::is_directory(out, ec), ConfigError, kWhere, "--out {} exists and is not a directory", out);
  std::vector<std::string> held;
  for (const auto& e : fs::directory_iterator(out, ec)) held.push_back(e.path().filename().string());
  PARALLM_CHECK(!ec, IoError, kWhere, "cannot list --out {}: {}", out, ec.message());
  std::sort(held.begin(), held.end());
  if (held.empty()) return "";
  PARALLM_CHECK(overwrite, ConfigError, kWhere,
                "--out {} is not empty (it holds {}): export into a new or empty directory, or give --overwrite to "
                "replace an earlier export there (its files that this export does not write are removed; other "
                "files are kept)",
                out, listed(held));
  const std::set<std::string> writes =
      bpe ? std::set<std::string>{"config.json", "model.safetensors", "vocab.json",
                                  "merges.txt",  "tokenizer.json",    "tokenizer_config.json"}
          : std::set<std::string>{"config.json", "model.safetensors"};
  std::vector<std::string> removed;
  for (const std::string& name : held) {
    if (!is_export_file(name) || writes.count(name)) continue;
    fs::remove_all(fs::path(out) / name, ec);
    PARALLM_CHECK(!ec, IoError, kWhere, "cannot remove {} (an earlier export's) from --out {}: {}", name, out,
                  ec.message());
    removed.push_back(name);
  }
  return listed(removed);
}

std::string export_run_hf(const std::string& run_dir, const std::string& out, const HfExportOptions& o) {
  ChooseOptions pick;
  pick.best_first = !o.latest;
  pick.params_only = true;
  const auto meta = choose_checkpoint(run_dir, nullptr, pick);
  const auto cfg = RunConfig::from_json(meta["config"]);
  const bool own = fs::exists(fs::path(run_dir) / "meta.json");
  const data::Vocab vocab = data::Vocab::load(own ? run_dir : cfg.data.dir);
  PARALLM_CHECK(vocab.size() <= cfg.model.vocab_size, ConfigError, kWhere,
                "the run's vocabulary has {} but its model only {} tokens", vocab.describe(), cfg.model.vocab_size);
  const std::string removed = prepare_export_dir(out, o.overwrite, vocab.is_bpe());
  model::GPT m(cfg.model, 1, 1);
  load_checkpoint(checkpoint_of(meta), m, nullptr, /*verify=*/false);  // verified when chosen
  std::vector<float> params(static_cast<size_t>(m.flat_size()));
  m.store_params(params.data());
  hf::export_hf(out, cfg.model, m.layout(), params.data(), vocab.size(), vocab.bpe(), o.write);
  return fmt::format("exported {} (iteration {}, {}) to {}: config.json, model.safetensors{}{}",
                     meta["_dir"].get<std::string>(), meta["iter"].get<int64_t>(), cfg.model.summary(), out,
                     vocab.is_bpe() ? ", vocab.json, merges.txt, tokenizer.json, tokenizer_config.json"
                                    : " (a character vocabulary: no tokenizer files)",
                     removed.empty() ? "" : "; removed the earlier export's " + removed);
}

}  // namespace parallm::train
