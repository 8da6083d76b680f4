// A Hugging Face model directory of any family parallm builds: the one place
// that picks GPT-2's files (hf_gpt2.h) or the Llama family's (hf_llama.h).
#pragma once
#include <string>
#include <vector>

#include "data/bpe.h"
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

// The whole model's directory; GPT-2's with its tokenizer files where `bpe` is given.
inline void export_hf(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout,
                      const float* params, int64_t vocab_rows, const data::Bpe* bpe, const HfWriteOptions& o = {}) {
  if (cfg.llama())
    export_hf_llama(dir, cfg, layout, params, vocab_rows, o);
  else
    export_hf_gpt2(dir, cfg, layout, params, vocab_rows, bpe);
}

}  // namespace parallm::hf
