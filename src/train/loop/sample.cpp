#include "train/loop/sample.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "model/kv_cache.h"

namespace parallm::train {

std::vector<int32_t> generate(model::GPT& m, std::vector<int32_t> tokens, const SampleOptions& opt) {
  if (!opt.kv_cache || !m.decode_supported()) {
    const auto logits = [&m](const int32_t* t, int64_t T, int64_t pos, float* out) {
      m.forward(t, nullptr, 1, T, model::StepContext{});  // eval mode: no dropout
      m.last_logits(out, 1, T, pos);
    };
    return generate(m.config(), m.token_multiple(), logits, std::move(tokens), opt);
  }
  model::KvCache cache(m.config(), m.device(), omp_get_max_threads());
  int64_t prev = 0;  // the last window's length: one more, and it only grew by the new token
  const auto logits = [&](const int32_t* t, int64_t T, int64_t pos, float* out) {
    PARALLM_CHECK(pos == T - 1, InternalError, "sample", "cached decoding reads the last position");
    if (T == prev + 1 && cache.length() == prev) {
      m.decode(t + prev, 1, cache, out);
    } else {  // the first window, or one that slid past the block: run it whole
      cache.clear();
      m.decode(t, T, cache, out);
    }
    prev = T;
  };
  return generate(m.config(), m.token_multiple(), logits, std::move(tokens), opt);
}

std::vector<int32_t> generate(const model::GPTConfig& cfg, int64_t token_multiple, const NextLogits& next,
                              std::vector<int32_t> tokens, const SampleOptions& opt) {
  PARALLM_CHECK(!tokens.empty(), ConfigError, "sample", "the prompt is empty (it must hold at least one token)");
  PARALLM_CHECK(opt.temperature >= 0, ConfigError, "sample", "temperature must be >= 0, got {}", opt.temperature);
  const int64_t block = cfg.block_size;
  PARALLM_CHECK(opt.vocab_limit >= 0 && opt.vocab_limit <= cfg.vocab_size, ConfigError, "sample",
                "the vocabulary ({} tokens) is larger than the model's ({})", opt.vocab_limit, cfg.vocab_size);
  // Only the first V logits are candidates (the rest are padding ids).
  const int64_t V = opt.vocab_limit > 0 ? opt.vocab_limit : cfg.vocab_size;
  std::vector<float> all(static_cast<size_t>(cfg.vocab_size)), logits(static_cast<size_t>(V));
  std::vector<std::pair<float, int32_t>> order(V);
  // A sequence-parallel model takes a multiple of its tp degree of tokens: the
  // context is padded at the end (causal attention: the padding cannot change
  // the positions before it) and the last real position's logits are read.
  const int64_t mult = token_multiple;
  std::vector<int32_t> padded;
  for (int64_t n = 0; n < opt.max_new_tokens; ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), block);
    const int32_t* ctx_tokens = tokens.data() + tokens.size() - T;
    const int64_t Tp = (T + mult - 1) / mult * mult;
    PARALLM_CHECK(Tp <= block, ConfigError, "sample", "model.block_size={} is not a multiple of the tp degree {}",
                  block, mult);
    if (Tp != T) {
      padded.assign(ctx_tokens, ctx_tokens + T);
      padded.resize(static_cast<size_t>(Tp), 0);
      ctx_tokens = padded.data();
    }
    next(ctx_tokens, Tp, T - 1, all.data());
    std::copy_n(all.begin(), V, logits.begin());  // the padding ids' logits are dropped
    if (opt.temperature == 0) {                   // greedy: the most likely token
      const auto best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      tokens.push_back(best);
      if (opt.on_token) opt.on_token(best);
      continue;
    }
    for (auto& l : logits) l /= opt.temperature;
    if (opt.top_k > 0 && opt.top_k < V) {
      for (int64_t v = 0; v < V; ++v) order[v] = {logits[v], static_cast<int32_t>(v)};
      std::nth_element(order.begin(), order.begin() + (opt.top_k - 1), order.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      const float kth = order[opt.top_k - 1].first;
      for (auto& l : logits)
        if (l < kth) l = -INFINITY;
    }
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (auto& l : logits) sum += (l = std::exp(l - mx));
    const double u = u32_to_unit(philox4x32(opt.seed, stream_id(kRngSample), tokens.size())[0]) * sum;
    double acc = 0;
    int32_t pick = static_cast<int32_t>(V - 1);
    for (int64_t v = 0; v < V; ++v) {
      acc += logits[v];
      if (u < acc) {
        pick = static_cast<int32_t>(v);
        break;
      }
    }
    while (logits[pick] == 0.0f && pick > 0) --pick;  // never pick a filtered token through rounding
    tokens.push_back(pick);
    if (opt.on_token) opt.on_token(pick);
  }
  return tokens;
}

}  // namespace parallm::train
