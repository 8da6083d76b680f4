#include "hf/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fileio.h"
#include "data/bpe_train.h"
#include "hf/hf_files.h"
#include "hf/safetensors.h"

namespace parallm::hf {

namespace {

namespace fs = std::filesystem;
constexpr const char* kHfWhere = "hf";
constexpr std::string_view kPrefix = "transformer.";

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}
// Hugging Face's Conv1D weights, [in, out].
bool conv1d(std::string_view name) {
  for (const char* t : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(name, t)) return true;
  return false;
}
// The causal-mask buffers older files carry: not weights.
bool mask_buffer(std::string_view name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}
std::string bare(std::string_view name) {
  return std::string(name.substr(0, kPrefix.size()) == kPrefix ? name.substr(kPrefix.size()) : name);
}

// The file's tensors by bare name; IoError for a name given with and without the prefix.
std::map<std::string, const StTensor*> by_bare_name(const SafetensorsReader& f) {
  std::map<std::string, const StTensor*> m;
  for (const auto& t : f.tensors())
    PARALLM_CHECK(m.emplace(bare(t.name), &t).second, IoError, kHfWhere,
                  "{}: tensor \"{}\" is there twice (with and "
                  "without \"transformer.\")",
                  f.path(), bare(t.name));
  return m;
}

// Slot `s`'s whole tensor (global_shape, parallm's orientation) from the file's tensor t.
std::vector<float> whole_tensor(const SafetensorsReader& f, const StTensor& t, const model::ParamSlot& s,
                                const model::GPTConfig& cfg) {
  const std::string name = bare(s.name);
  const std::vector<int64_t> g(s.global_shape.begin(), s.global_shape.end());
  std::vector<int64_t> want = g;
  const bool wte = name == "wte.weight" || name == "lm_head.weight", wpe = name == "wpe.weight";
  if (conv1d(name)) want = {g[1], g[0]};
  if ((wte || wpe) && t.shape.size() == 2) want[0] = t.shape[0];  // rows checked below
  PARALLM_CHECK(t.shape == want, IoError, kHfWhere, "{}: tensor \"{}\" has shape {}, but the model ({}) needs {}{}",
                f.path(), t.name, shape_text(t.shape), cfg.summary(), shape_text(want),
                conv1d(name) ? " (Conv1D: [in, out])" : "");
  PARALLM_CHECK(!wte || t.shape[0] <= g[0], IoError, kHfWhere,
                "{}: the token table has {} rows but model.vocab_size is {}: set model.vocab_size to at least {}",
                f.path(), t.shape[0], g[0], t.shape[0]);
  PARALLM_CHECK(!wpe || t.shape[0] >= g[0], IoError, kHfWhere,
                "{}: the position table has {} rows (n_positions) but model.block_size is {}: at most {}", f.path(),
                t.shape[0], g[0], t.shape[0]);
  std::vector<float> file(static_cast<size_t>(t.numel()));
  f.read(t, file.data());
  check_finite(file.data(), static_cast<int64_t>(file.size()), f.path(), t.name);
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(1, shape_numel(s.global_shape))), 0.0f);
  if (conv1d(name)) {
    const int64_t rows = g[0], cols = g[1];  // out, in
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t o = 0; o < rows; ++o)
        out[static_cast<size_t>(o * cols + i)] = file[static_cast<size_t>(i * rows + o)];
  } else {
    std::copy_n(file.begin(), std::min(file.size(), out.size()), out.begin());  // wte pads, wpe crops
  }
  return out;
}

}  // namespace

model::GPTConfig hf_gpt2_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const nlohmann::json j = read_json_object(path);
  auto size = [&](std::initializer_list<const char*> keys) -> int64_t {
    for (const char* k : keys)
      if (j.contains(k)) {
        PARALLM_CHECK(j[k].is_number_unsigned() && j[k].get<int64_t>() > 0, IoError, kHfWhere,
                      "{}: {} is {}, not a positive integer", path, k, j[k].dump());
        return j[k].get<int64_t>();
      }
    throw IoError(kHfWhere, fmt::format("{} has no {}", path, *keys.begin()));
  };
  const std::string type = j.value("model_type", "gpt2");
  PARALLM_CHECK(type == "gpt2", IoError, kHfWhere,
                "{}: model_type \"{}\": parallm reads gpt2, llama, qwen2, qwen3, qwen3_moe and mixtral", path, type);
  model::GPTConfig c;
  c.n_layer = size({"n_layer"});
  c.n_head = size({"n_head"});
  c.n_embd = size({"n_embd"});
  c.block_size = size({"n_positions", "n_ctx"});
  c.vocab_size = size({"vocab_size"});
  c.bias = true;
  const std::string act = j.value("activation_function", "gelu_new");
  PARALLM_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu", IoError, kHfWhere,
                "{}: activation_function \"{}\": GPT-2's are gelu_new (tanh) and gelu (exact)", path, act);
  c.gelu = act == "gelu" ? kernels::GeluKind::Exact : kernels::GeluKind::Tanh;
  PARALLM_CHECK(!j.contains("n_inner") || j["n_inner"].is_null() || j["n_inner"] == 4 * c.n_embd, IoError, kHfWhere,
                "{}: n_inner {}: parallm's MLP is 4 x n_embd = {} wide", path, j["n_inner"].dump(), 4 * c.n_embd);
  PARALLM_CHECK(j.value("layer_norm_epsilon", 1e-5) == 1e-5, IoError, kHfWhere,
                "{}: layer_norm_epsilon {}: parallm's LayerNorm uses 1e-5", path, j["layer_norm_epsilon"].dump());
  const auto tie = j.find("tie_word_embeddings");
  PARALLM_CHECK(tie == j.end() || tie->is_boolean(), IoError, kHfWhere,
                "{}: tie_word_embeddings is {}, not true or false", path, tie->dump());
  c.tie_embeddings = tie == j.end() || tie->get<bool>();
  return c;
}

std::vector<float> load_hf_gpt2(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout) {
  const SafetensorsReader f((fs::path(dir) / "model.safetensors").string());
  const auto tensors = by_bare_name(f);
  const model::ParamLayout whole(cfg);
  for (const auto& [name, t] : tensors) {
    if (mask_buffer(name) || (name == "lm_head.weight" && cfg.tie_embeddings)) continue;
    bool known = false;
    for (const auto& s : whole.slots()) known = known || bare(s.name) == name;
    PARALLM_CHECK(known, IoError, kHfWhere, "{}: tensor \"{}\" is not a weight of the model ({})", f.path(), t->name,
                  cfg.summary());
  }
  std::vector<float> out(static_cast<size_t>(layout.total()), 0.0f);
  for (int s = 0; s < static_cast<int>(layout.slots().size()); ++s) {
    const model::ParamSlot& slot = layout.slots()[static_cast<size_t>(s)];
    const auto it = tensors.find(bare(slot.name));
    PARALLM_CHECK(it != tensors.end(), IoError, kHfWhere, "{} has no tensor \"{}\" (the model, {}, needs it{})",
                  f.path(), bare(slot.name), cfg.summary(),
                  cfg.bias || bare(slot.name).find("bias") == std::string::npos ? "" : "; set model.bias=true");
    const auto g = whole_tensor(f, *it->second, slot, cfg);
    layout.slice(s, g.data(), out.data() + slot.offset);
  }
  if (const auto head = tensors.find("lm_head.weight"); head != tensors.end() && cfg.tie_embeddings) {
    const auto wte = tensors.find("wte.weight");
    bool same = wte != tensors.end() && head->second->shape == wte->second->shape;
    if (same) {
      std::vector<float> a(static_cast<size_t>(head->second->numel())), b(a.size());
      f.read(*head->second, a.data());
      f.read(*wte->second, b.data());
      same = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;  // bitwise: a NaN equals itself
    }
    PARALLM_CHECK(same, IoError, kHfWhere,
                  "{}: lm_head.weight is not wte.weight (an untied head), but the model ties them "
                  "(model.tie_embeddings=true; config.json's tie_word_embeddings sets it)",
                  f.path());
  }
  return out;
}

void export_hf_gpt2(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout,
                    const float* params, int64_t vocab_rows, const data::Bpe* bpe) {
  PARALLM_CHECK(layout.whole(), InternalError, kHfWhere, "export takes the whole model's layout");
  PARALLM_CHECK(vocab_rows > 0 && vocab_rows <= cfg.vocab_size, ConfigError, kHfWhere,
                "{} token rows of a model with model.vocab_size={}", vocab_rows, cfg.vocab_size);
  make_directories(dir, kHfWhere, "output directory");
  const int64_t C = cfg.n_embd;
  std::vector<StWrite> tensors;
  std::vector<std::vector<float>> owned;  // transposed weights and zero biases
  for (const auto& s : layout.slots()) {
    const bool head = s.name == "lm_head.weight";  // an untied head: outside "transformer." as Hugging Face names it
    const std::string name = head ? s.name : std::string(kPrefix) + bare(s.name);
    const float* p = params + s.offset;
    std::vector<int64_t> shape(s.shape.begin(), s.shape.end());
    if (conv1d(name)) {
      const int64_t rows = shape[0], cols = shape[1];
      auto& t = owned.emplace_back(static_cast<size_t>(rows * cols));
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t i = 0; i < cols; ++i) t[static_cast<size_t>(i * rows + o)] = p[o * cols + i];
      p = t.data();
      shape = {cols, rows};
    }
    if (bare(s.name) == "wte.weight" || head) shape[0] = vocab_rows;
    tensors.push_back({name, shape, p});
  }
  if (!cfg.bias) {  // Hugging Face's GPT-2 has every bias: zeros change nothing
    auto zeros = [&](const std::string& name, int64_t n) {
      tensors.push_back({std::string(kPrefix) + name, {n}, owned.emplace_back(static_cast<size_t>(n), 0.0f).data()});
    };
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      const std::string h = fmt::format("h.{}.", l);
      zeros(h + "ln_1.bias", C);
      zeros(h + "attn.c_attn.bias", 3 * C);
      zeros(h + "attn.c_proj.bias", C);
      zeros(h + "ln_2.bias", C);
      zeros(h + "mlp.c_fc.bias", 4 * C);
      zeros(h + "mlp.c_proj.bias", C);
    }
    zeros("ln_f.bias", C);
  }
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
  const int eot = bpe && bpe->end_of_text() >= 0 ? bpe->end_of_text() : static_cast<int>(vocab_rows - 1);
  nlohmann::ordered_json c = {{"architectures", {"GPT2LMHeadModel"}},
                              {"model_type", "gpt2"},
                              {"vocab_size", vocab_rows},
                              {"n_positions", cfg.block_size},
                              {"n_ctx", cfg.block_size},
                              {"n_embd", cfg.n_embd},
                              {"n_layer", cfg.n_layer},
                              {"n_head", cfg.n_head},
                              {"n_inner", nullptr},
                              {"activation_function", cfg.gelu == kernels::GeluKind::Exact ? "gelu" : "gelu_new"},
                              {"layer_norm_epsilon", 1e-5},
                              {"resid_pdrop", cfg.dropout},
                              {"embd_pdrop", cfg.dropout},
                              {"attn_pdrop", cfg.dropout},
                              {"initializer_range", 0.02},
                              {"scale_attn_weights", true},
                              {"tie_word_embeddings", cfg.tie_embeddings},
                              {"bos_token_id", eot},
                              {"eos_token_id", eot},
                              {"torch_dtype", "float32"}};
  const std::string text = c.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "config.json").string(), {{text.data(), text.size()}});
  if (!bpe) return;
  data::write_bpe_files(*bpe, dir);
  const std::string e = bpe->end_of_text() >= 0 ? "<|endoftext|>" : "";
  nlohmann::ordered_json tc = {
      {"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", cfg.block_size}, {"add_prefix_space", false}};
  if (!e.empty()) tc.update({{"bos_token", e}, {"eos_token", e}, {"unk_token", e}});
  const std::string tt = tc.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "tokenizer_config.json").string(), {{tt.data(), tt.size()}});
}

}  // namespace parallm::hf
