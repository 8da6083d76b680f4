// Generation with a KV cache (model/kv_cache.h, train/loop/sample.h): for
// GPT-2 and the Llama family, each step's logits equal recomputing the whole
// context, and the generated ids are the same for 200 tokens at temperature 0
// and at a fixed seed, including past the block size (the window slides and
// is run whole, as without a cache).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/gpt.h"
#include "model/kv_cache.h"
#include "train/loop/sample.h"

using namespace parallm;

namespace {

model::GPTConfig config(model::Arch arch, int64_t block) {
  model::GPTConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = block;
  c.vocab_size = 53;
  if (arch != model::Arch::Gpt2) {
    c.n_kv_head = 2;
    c.head_dim = 8;
    c.intermediate_size = 48;
    c.rope_scaling.kind = model::RopeScaling::Kind::Llama3;
    c.rope_scaling.original = 16;
  }
  return c;
}

// The usual init times `scale`: x4 spreads the logits (a random model's are
// nearly uniform) so that rounding cannot flip a choice between two of them.
void init(model::GPT& m, float scale) {
  m.init_weights(3);
  std::vector<float> p(static_cast<size_t>(m.flat_size()));
  m.store_params(p.data());
  for (auto& x : p) x *= scale;
  m.load_params(p.data());
}

}  // namespace

TEST(KvCache, EachStepsLogitsEqualRecomputingTheContext) {
  for (auto arch : {model::Arch::Gpt2, model::Arch::Llama, model::Arch::Qwen3}) {
    const auto cfg = config(arch, 64);
    model::GPT m(cfg, 1, cfg.block_size);
    init(m, 1.0f);
    ASSERT_TRUE(m.decode_supported());
    model::KvCache cache(cfg, m.device(), 2);
    std::vector<int32_t> tokens = {1, 7, 3, 40, 2};
    std::vector<float> cached(static_cast<size_t>(cfg.vocab_size)), full(cached.size());
    m.decode(tokens.data(), static_cast<int64_t>(tokens.size()), cache, cached.data());  // the prompt at once
    double worst = 0, scale = 0;  // the largest difference, the largest logit
    for (int step = 0; step < 40; ++step) {
      const auto T = static_cast<int64_t>(tokens.size());
      m.forward(tokens.data(), nullptr, 1, T, model::StepContext{});
      m.last_logits(full.data(), 1, T);
      for (size_t v = 0; v < full.size(); ++v) {
        worst = std::max(worst, double(std::fabs(cached[v] - full[v])));
        scale = std::max(scale, double(std::fabs(full[v])));
      }
      tokens.push_back(static_cast<int32_t>((step * 17 + 5) % cfg.vocab_size));
      m.decode(&tokens.back(), 1, cache, cached.data());
    }
    std::printf("%s: cached logits within %.2e of recomputed ones over 40 steps (of the largest logit, %.1f)\n",
                model::arch_name(arch), worst / scale, scale);
    EXPECT_LE(worst / scale, 1e-6) << model::arch_name(arch);
  }
}

TEST(KvCache, GeneratedIdsEqualRecomputationAtTemperatureZeroAndAFixedSeed) {
  // Block 256: 200 tokens from the cache alone; 64: the window slides after 64 tokens.
  for (const auto& [arch, block] : {std::pair{model::Arch::Llama, int64_t{256}},
                                    {model::Arch::Qwen3, int64_t{256}},
                                    {model::Arch::Gpt2, int64_t{256}},
                                    {model::Arch::Llama, int64_t{64}}}) {
    const auto cfg = config(arch, block);
    model::GPT m(cfg, 1, cfg.block_size);
    init(m, 4.0f);
    for (float temperature : {0.0f, 0.8f}) {
      train::SampleOptions o;
      o.max_new_tokens = 200;
      o.temperature = temperature;
      o.top_k = 0;
      o.seed = 11;
      const auto cached = train::generate(m, {1, 2, 3}, o);
      o.kv_cache = false;
      const auto full = train::generate(m, {1, 2, 3}, o);
      EXPECT_EQ(cached, full) << model::arch_name(arch) << " block " << block << " temperature " << temperature;
    }
  }
}
