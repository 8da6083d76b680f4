// Autoregressive sampling with temperature and top-k (temperature 0: the most
// likely token, the first of equals). Each new token is drawn from the
// counter-based RNG at (seed, position), so a sample is reproducible. With a
// KV cache (model/kv_cache.h) each step runs the model on the new token alone
// while the context fits the block; when it slides, the window is run whole,
// as without one.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt.h"

namespace parallm::train {

struct SampleOptions {
  int64_t max_new_tokens = 200;
  float temperature = 0.8f;
  int64_t top_k = 200;  // 0 = no top-k filter
  uint64_t seed = 1337;
  // Ids at or above this are never drawn (a model.vocab_size padded beyond the
  // dataset's vocabulary); 0 = the model's whole vocabulary.
  int64_t vocab_limit = 0;
  // Called with each new token as soon as it is drawn (to stream the text).
  std::function<void(int32_t)> on_token;
  // generate(GPT&): a KV cache where the model supports one (GPT::decode_supported).
  bool kv_cache = true;
};

// Returns prompt + generated tokens. The model must allow batch 1; the context
// is cropped to its block size. The ids equal recomputation's: at temperature
// 0 as long as no two logits tie within rounding, at a fixed seed as long as
// no draw falls within rounding of a boundary.
std::vector<int32_t> generate(model::GPT& m, std::vector<int32_t> tokens, const SampleOptions& opt);
// The same from any source of logits: `logits(tokens, T, pos, out)` runs the
// model (of `cfg`, taking a multiple of `token_multiple` tokens) on one
// sequence of T tokens and writes the vocabulary's logits of position pos.
using NextLogits = std::function<void(const int32_t* tokens, int64_t T, int64_t pos, float* out)>;
std::vector<int32_t> generate(const model::GPTConfig& cfg, int64_t token_multiple, const NextLogits& logits,
                              std::vector<int32_t> tokens, const SampleOptions& opt);

}  // namespace parallm::train
