// Hugging Face Llama / Qwen3 directories (hf/hf_llama.h): the reference
// script's directories (tools/torch_ref/llama_hf_dir.py: fp32 sharded Llama
// with llama3 scaling; bf16 tied Qwen3) load and give its logits; an export
// read back is bitwise at every layout (whole, tp 2 and 4 with KV heads
// replicated, pipeline stages), sharded or not, and BF16 is the rounded
// weights; config.json round-trips; bad directories are refused naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "hf/hf_model.h"
#include "model/gpt.h"
#include "test_paths.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {

std::string golden(const std::string& name) {
  return test::test_dir() + "/golden/" + name;
}

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("parallm_hf_llama_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p;
}

model::GPTConfig tiny(model::Arch arch, bool tie, bool bias) {
  model::GPTConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.head_dim = 8;
  c.intermediate_size = 40;
  c.block_size = 16;
  c.vocab_size = 37;
  c.tie_embeddings = tie;
  c.attention_bias = bias;
  c.rope_scaling.kind = model::RopeScaling::Kind::Llama3;
  c.rope_scaling.original = 8;
  return c;
}

std::vector<float> whole_params(const model::GPTConfig& cfg, uint64_t seed) {
  const model::ParamLayout whole(cfg);
  std::vector<float> p(static_cast<size_t>(whole.total()));
  whole.init(p.data(), seed);
  return p;
}

}  // namespace

TEST(HfLlama, TheReferenceScriptsDirectoriesLoadAndGiveItsLogits) {
  for (const char* name : {"hf_llama_tiny", "hf_qwen3_tiny", "hf_qwen3_moe_tiny", "hf_mixtral_tiny"}) {
    const std::string dir = golden(name);
    const model::GPTConfig cfg = hf::hf_config(dir);
    ASSERT_TRUE(cfg.llama()) << name;
    std::vector<int32_t> tokens;
    {
      std::ifstream f(dir + "/tokens.json");
      tokens = nlohmann::json::parse(f).get<std::vector<int32_t>>();
    }
    const auto T = static_cast<int64_t>(tokens.size()), V = cfg.vocab_size;
    std::vector<float> want(static_cast<size_t>(T * V));
    {
      std::ifstream f(dir + "/logits.bin", std::ios::binary);
      f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
      ASSERT_TRUE(f) << dir << "/logits.bin";
    }
    model::GPT m(cfg, 1, T);
    m.load_params(hf::load_hf(dir, cfg, m.layout()).data());
    std::vector<int32_t> targets(tokens.size(), 0);
    m.forward(tokens.data(), targets.data(), 1, T, model::StepContext{});
    std::vector<float> got(want.size());
    m.all_logits(got.data(), 1, T);
    double mx = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      mx = std::max(mx, std::fabs(double(want[i])));
      err = std::max(err, std::fabs(double(got[i]) - want[i]));
    }
    std::printf("%s (%s): logits within %.2e of the reference's (max |logit| %.3f)\n", name, cfg.summary().c_str(),
                err / mx, mx);
    EXPECT_LE(err / mx, 1e-5) << name;
  }
}

TEST(HfLlama, AnExportReadsBackBitwiseAtEveryLayout) {
  for (const auto& [arch, tie, bias] :
       {std::tuple{model::Arch::Llama, false, true}, {model::Arch::Qwen3, true, false}}) {
    const model::GPTConfig cfg = tiny(arch, tie, bias);
    const model::ParamLayout whole(cfg);
    const auto params = whole_params(cfg, 5);
    const fs::path dir = scratch(std::string(model::arch_name(arch)) + "_export");
    hf::export_hf_llama(dir.string(), cfg, whole, params.data(), cfg.vocab_size, {false, 20000});  // several shards
    ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
    const model::GPTConfig back = hf::hf_config(dir.string());
    EXPECT_EQ(back.summary(), cfg.summary());
    EXPECT_EQ(back.rms_norm_eps, cfg.rms_norm_eps);
    struct Part {
      model::ShardSpec tp;
      model::StageSpec stage;
    };
    for (const Part& part : {Part{{1, 0}, {}}, Part{{2, 0}, {}}, Part{{2, 1}, {}}, Part{{4, 1}, {}}, Part{{4, 3}, {}},
                             Part{{1, 0}, {{{0, 1}}}}, Part{{2, 1}, {{{1, 2}}}}}) {
      const model::ParamLayout layout(cfg, part.tp, part.stage);
      const auto got = hf::load_hf(dir.string(), cfg, layout);
      std::vector<float> want(static_cast<size_t>(layout.total()), 0.0f);
      for (int s = 0; s < static_cast<int>(layout.slots().size()); ++s) {
        const auto& slot = layout.slots()[static_cast<size_t>(s)];
        layout.slice(s, params.data() + whole.find(slot.name).offset, want.data() + slot.offset);
      }
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << model::arch_name(arch) << " tp " << part.tp.tp << " rank " << part.tp.rank << " stages "
          << part.stage.chunks.size();
    }
  }
}

TEST(HfLlama, Bf16WeightsAreTheRoundedOnesAndTheVocabularyIsCut) {
  model::GPTConfig cfg = tiny(model::Arch::Llama, false, false);
  const model::ParamLayout whole(cfg);
  const auto params = whole_params(cfg, 9);
  const fs::path dir = scratch("bf16");
  hf::export_hf_llama(dir.string(), cfg, whole, params.data(), 30, {true, 1LL << 30});
  ASSERT_TRUE(fs::exists(dir / "model.safetensors"));
  const model::GPTConfig back = hf::hf_config(dir.string());
  EXPECT_EQ(back.vocab_size, 30);
  const auto got = hf::load_hf(dir.string(), cfg, whole);  // model.vocab_size 37 > the file's 30: zero rows
  for (const auto& s : whole.slots())
    for (int64_t i = 0; i < s.numel; ++i) {
      const bool cut = (s.name == "model.embed_tokens.weight" || s.name == "lm_head.weight") && i >= 30 * cfg.n_embd;
      const float want = cut ? 0.0f : bf16_to_f32(f32_to_bf16(params[static_cast<size_t>(s.offset + i)]));
      ASSERT_EQ(got[static_cast<size_t>(s.offset + i)], want) << s.name << "[" << i << "]";
    }
}

TEST(HfLlama, BadDirectoriesAreRefusedNamingTheKey) {
  const model::GPTConfig cfg = tiny(model::Arch::Llama, false, false);
  const fs::path dir = scratch("bad");
  hf::export_hf_llama(dir.string(), cfg, model::ParamLayout(cfg), whole_params(cfg, 1).data(), cfg.vocab_size, {});
  const fs::path config = dir / "config.json";
  nlohmann::json good;
  {
    std::ifstream f(config);
    good = nlohmann::json::parse(f);
  }
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit) -> std::string {
    nlohmann::json j = good;
    edit(j);
    std::ofstream(config) << j.dump();
    try {
      hf::hf_config(dir.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  auto has = [](const std::string& e, const char* text) { return e.find(text) != std::string::npos; };
  std::string e = refused([](auto& j) { j["model_type"] = "mistral"; });
  EXPECT_TRUE(has(e, "model_type \"mistral\"")) << e;
  e = refused([](auto& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  EXPECT_TRUE(has(e, "rope_scaling type \"yarn\"")) << e;
  e = refused([](auto& j) { j["num_key_value_heads"] = 3; });
  EXPECT_TRUE(has(e, "model.n_head (4) must be a multiple of model.n_kv_head (3)")) << e;
  e = refused([](auto& j) { j["head_dim"] = 7; });
  EXPECT_TRUE(has(e, "model.head_dim (7) must be even")) << e;
  e = refused([](auto& j) { j["attention_bias"] = true; });
  EXPECT_TRUE(has(e, "also biases o_proj")) << e;
  e = refused([](auto& j) { j["hidden_act"] = "gelu"; });
  EXPECT_TRUE(has(e, "hidden_act \"gelu\"")) << e;
  e = refused([](auto& j) { j.erase("hidden_size"); });
  EXPECT_TRUE(has(e, "has no hidden_size")) << e;
  // A GPT-2 directory given to a Llama model: its tensors are not the model's.
  std::ofstream(config) << good.dump();
  const fs::path gpt2 = scratch("gpt2");
  model::GPTConfig g;
  g.n_layer = 1;
  g.n_head = 2;
  g.n_embd = 8;
  g.block_size = 8;
  g.vocab_size = 11;
  hf::export_hf(gpt2.string(), g, model::ParamLayout(g), whole_params(g, 2).data(), 11, nullptr);
  try {
    hf::load_hf_llama(gpt2.string(), cfg, model::ParamLayout(cfg));
    FAIL() << "a GPT-2 directory read as a Llama";
  } catch (const IoError& err) {
    EXPECT_TRUE(has(err.what(), "is not a weight of the model")) << err.what();
  }
}

// Qwen3-MoE and Mixtral exports (one tensor per expert) read back bitwise at
// tp 1 and 2 and a pipeline stage, config.json round-trips, and what their
// config.json cannot say (shared experts, sigmoid scores, dense layers in
// Mixtral) is refused naming the key.
TEST(HfLlama, MoeExportsReadBackBitwise) {
  for (auto arch : {model::Arch::Qwen3, model::Arch::Llama}) {
    model::GPTConfig cfg = tiny(arch, false, false);
    cfg.n_layer = 3;
    cfg.rope_scaling = {};
    cfg.moe = {.experts = 4, .top_k = 2, .intermediate = 12, .aux_coef = 0.01};
    if (arch == model::Arch::Qwen3) cfg.moe.every = 2;           // layers 0 and 2 (mlp_only_layers [1])
    if (arch == model::Arch::Llama) cfg.intermediate_size = 12;  // Mixtral's intermediate_size: the experts' width
    const model::ParamLayout whole(cfg);
    const auto params = whole_params(cfg, 9);
    const fs::path dir = scratch(std::string("moe_") + model::arch_name(arch));
    hf::export_hf_llama(dir.string(), cfg, whole, params.data(), cfg.vocab_size, {false, 20000});
    const model::GPTConfig back = hf::hf_config(dir.string());
    EXPECT_EQ(back.summary(), cfg.summary());
    EXPECT_EQ(back.moe, cfg.moe);
    for (const auto& [tp, stage] : {std::pair{model::ShardSpec{1, 0}, model::StageSpec{}},
                                    {model::ShardSpec{2, 1}, model::StageSpec{}},
                                    {model::ShardSpec{2, 0}, model::StageSpec{{{1, 3}}}}}) {
      const model::ParamLayout layout(cfg, tp, stage);
      const auto got = hf::load_hf(dir.string(), cfg, layout);
      std::vector<float> want(static_cast<size_t>(layout.total()), 0.0f);
      for (int s = 0; s < static_cast<int>(layout.slots().size()); ++s) {
        const auto& slot = layout.slots()[static_cast<size_t>(s)];
        layout.slice(s, params.data() + whole.find(slot.name).offset, want.data() + slot.offset);
      }
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << model::arch_name(arch) << " tp " << tp.tp;
    }
    model::GPTConfig shared = cfg;
    shared.moe.shared = 1;
    const model::ParamLayout ws(shared);
    const auto ps = whole_params(shared, 9);
    EXPECT_THROW(
        {
          try {
            hf::export_hf_llama(scratch("moe_shared").string(), shared, ws, ps.data(), shared.vocab_size, {});
          } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("model.moe_shared_experts"), std::string::npos) << e.what();
            throw;
          }
        },
        ConfigError);
  }
}
