// A Hugging Face model directory of any family parallm builds: the one place
// that picks GPT-2's files (hf_gpt2.h) or the Llama family's (hf_llama.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fileio.h"
#include "data/bpe.h"
#include "data/bpe_train.h"
#include "hf/hf_gpt2.h"
#include "hf/hf_llama.h"

namespace parallm::hf {

// config.json's model (model_type gpt2, or llama / qwen2 / qwen3).
inline model::GPTConfig hf_config(const std::string& dir) {
  return is_llama_family(dir) ? hf_llama_config(dir) : hf_gpt2_config(dir);
}

inline std::vector<float> load_hf(const std::string& dir, const model::GPTConfig& cfg,
                                  const model::ParamLayout& layout) {
  return cfg.llama() ? load_hf_llama(dir, cfg, layout) : load_hf_gpt2(dir, cfg, layout);
}

// The whole model's directory, with its tokenizer files (tokenizer.json, vocab.json, merges.txt) where `bpe` is given.
inline void export_hf(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout,
                      const float* params, int64_t vocab_rows, const data::Bpe* bpe, const HfWriteOptions& o = {}) {
  if (!cfg.llama()) return export_hf_gpt2(dir, cfg, layout, params, vocab_rows, bpe);
  export_hf_llama(dir, cfg, layout, params, vocab_rows, o);
  if (!bpe) return;
  data::write_bpe_files(*bpe, dir);
  // transformers' AutoTokenizer reads tokenizer.json through its fast tokenizer class.
  const std::string tc =
      nlohmann::ordered_json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", cfg.block_size}}.dump(
          2) +
      "\n";
  write_file_atomic(dir + "/tokenizer_config.json", {{tc.data(), tc.size()}});
}

}  // namespace parallm::hf
