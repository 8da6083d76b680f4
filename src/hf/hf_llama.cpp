// Hugging Face Llama / Qwen3 directories (hf_llama.h): config.json both
// ways, the weights read by name from one file or an index of shards, and
// written in shards of a bounded size with their index.
#include "hf/hf_llama.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/fileio.h"
#include "hf/hf_files.h"
#include "hf/hf_moe.h"
#include "hf/safetensors.h"

namespace parallm::hf {

namespace {

namespace fs = std::filesystem;
constexpr const char* kWhere = "hf";

std::string type_of(const nlohmann::json& j) {
  return j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
}

// The weight files of a directory: each tensor's reader, by name.
struct Weights {
  std::vector<std::unique_ptr<SafetensorsReader>> files;
  std::map<std::string, std::pair<const SafetensorsReader*, const StTensor*>> tensors;
};

Weights open_weights(const std::string& dir) {
  Weights w;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> names;
  if (fs::exists(index)) {
    const nlohmann::json j = read_json_object(index.string());
    PARALLM_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), IoError, kWhere,
                  "{} has no \"weight_map\" object", index.string());
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      PARALLM_CHECK(file.is_string() && fs::path(file.get<std::string>()).filename() == file.get<std::string>(),
                    IoError, kWhere, "{}: tensor \"{}\" maps to {}, not a file name in the directory", index.string(),
                    tensor, file.dump());
      if (std::find(names.begin(), names.end(), file.get<std::string>()) == names.end())
        names.push_back(file.get<std::string>());
    }
  } else {
    names.push_back("model.safetensors");
  }
  for (const std::string& n : names) {
    w.files.push_back(std::make_unique<SafetensorsReader>((fs::path(dir) / n).string()));
    const SafetensorsReader* f = w.files.back().get();
    for (const auto& t : f->tensors())
      PARALLM_CHECK(w.tensors.emplace(t.name, std::make_pair(f, &t)).second, IoError, kWhere,
                    "{}: tensor \"{}\" is in two of the directory's files", f->path(), t.name);
  }
  return w;
}

// Slot s's whole tensor (global_shape) from the file; the token tables may have fewer rows (zero padding).
std::vector<float> llama_tensor(const SafetensorsReader& f, const StTensor& t, const model::ParamSlot& s,
                                const model::GPTConfig& cfg) {
  const std::vector<int64_t> g(s.global_shape.begin(), s.global_shape.end());
  const bool table = s.name == "model.embed_tokens.weight" || s.name == "lm_head.weight";
  std::vector<int64_t> want = g;
  if (table && t.shape.size() == 2) want[0] = t.shape[0];
  PARALLM_CHECK(t.shape == want, IoError, kWhere, "{}: tensor \"{}\" has shape {}, but the model ({}) needs {}",
                f.path(), t.name, shape_text(t.shape), cfg.summary(), shape_text(want));
  PARALLM_CHECK(!table || t.shape[0] <= g[0], IoError, kWhere,
                "{}: \"{}\" has {} rows but model.vocab_size is {}: set model.vocab_size to at least {}", f.path(),
                t.name, t.shape[0], g[0], t.shape[0]);
  std::vector<float> out(static_cast<size_t>(shape_numel(s.global_shape)), 0.0f);
  f.read(t, out.data());  // a shorter token table fills its first rows
  check_finite(out.data(), t.numel(), f.path(), t.name);
  return out;
}

// Slot s's whole tensor from its file tensors (hf_moe.h: one, or one per expert).
std::vector<float> whole_slot(const Weights& w, const std::string& dir, const model::ParamSlot& s,
                              const model::GPTConfig& cfg) {
  const std::vector<HfPiece> pieces = hf_pieces(cfg, s);
  auto find = [&](const std::string& name) {
    const auto it = w.tensors.find(name);
    PARALLM_CHECK(it != w.tensors.end(), IoError, kWhere, "{} has no tensor \"{}\" (the model, {}, needs it)", dir,
                  name, cfg.summary());
    return it->second;
  };
  if (pieces.size() == 1 && pieces[0].name == s.name) {
    const auto [f, t] = find(s.name);
    return llama_tensor(*f, *t, s, cfg);
  }
  std::vector<float> out(static_cast<size_t>(shape_numel(s.global_shape)), 0.0f);
  for (const HfPiece& p : pieces) {
    const auto [f, t] = find(p.name);
    PARALLM_CHECK(t->shape == p.shape, IoError, kWhere, "{}: tensor \"{}\" has shape {}, but the model ({}) needs {}",
                  f->path(), p.name, shape_text(t->shape), cfg.summary(), shape_text(p.shape));
    f->read(*t, out.data() + p.offset);
    check_finite(out.data() + p.offset, t->numel(), f->path(), p.name);
  }
  return out;
}

int64_t positive(const nlohmann::json& j, const std::string& path, const char* key) {
  PARALLM_CHECK(j.contains(key), IoError, kWhere, "{} has no {}", path, key);
  PARALLM_CHECK(j[key].is_number_unsigned() && j[key].get<int64_t>() > 0, IoError, kWhere,
                "{}: {} is {}, not a positive integer", path, key, j[key].dump());
  return j[key].get<int64_t>();
}

double number(const nlohmann::json& j, const std::string& path, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  PARALLM_CHECK(j[key].is_number(), IoError, kWhere, "{}: {} is {}, not a number", path, key, j[key].dump());
  return j[key].get<double>();
}

bool flag(const nlohmann::json& j, const std::string& path, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  PARALLM_CHECK(j[key].is_boolean(), IoError, kWhere, "{}: {} is {}, not true or false", path, key, j[key].dump());
  return j[key].get<bool>();
}

void read_rope_scaling(const nlohmann::json& j, const std::string& path, model::GPTConfig& c) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const nlohmann::json& r = j["rope_scaling"];
  PARALLM_CHECK(r.is_object(), IoError, kWhere, "{}: rope_scaling is {}, not an object or null", path, r.dump());
  const std::string type = r.value("rope_type", r.value("type", std::string("default")));
  PARALLM_CHECK(type == "llama3" || type == "default", IoError, kWhere,
                "{}: rope_scaling type \"{}\": parallm builds Llama 3's (\"llama3\") and none", path, type);
  if (type == "default") return;
  c.rope_scaling.kind = model::RopeScaling::Kind::Llama3;
  c.rope_scaling.factor = number(r, path, "factor", 8.0);
  c.rope_scaling.low_freq_factor = number(r, path, "low_freq_factor", 1.0);
  c.rope_scaling.high_freq_factor = number(r, path, "high_freq_factor", 4.0);
  c.rope_scaling.original = positive(r, path, "original_max_position_embeddings");
}

}  // namespace

bool is_llama_family(const std::string& dir) {
  const fs::path p = fs::path(dir) / "config.json";
  if (!fs::exists(p)) return false;
  const std::string t = type_of(read_json_object(p.string()));
  return t == "llama" || t == "qwen2" || t == "qwen3" || is_moe_type(t);
}

model::GPTConfig hf_llama_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const nlohmann::json j = read_json_object(path);
  const std::string type = type_of(j);
  PARALLM_CHECK(type == "llama" || type == "qwen2" || type == "qwen3" || is_moe_type(type), IoError, kWhere,
                "{}: model_type \"{}\": parallm reads gpt2, llama, qwen2, qwen3, qwen3_moe and mixtral", path, type);
  model::GPTConfig c;
  c.arch = type == "qwen3" || type == "qwen3_moe" ? model::Arch::Qwen3 : model::Arch::Llama;
  c.n_layer = positive(j, path, "num_hidden_layers");
  c.n_head = positive(j, path, "num_attention_heads");
  c.n_embd = positive(j, path, "hidden_size");
  c.n_kv_head = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                    ? positive(j, path, "num_key_value_heads")
                    : c.n_head;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? positive(j, path, "head_dim") : 0;
  c.intermediate_size = positive(j, path, "intermediate_size");
  c.block_size = positive(j, path, "max_position_embeddings");
  c.vocab_size = positive(j, path, "vocab_size");
  c.rope_theta = number(j, path, "rope_theta", 10000.0);
  c.rms_norm_eps = static_cast<float>(number(j, path, "rms_norm_eps", 1e-6));
  c.tie_embeddings = flag(j, path, "tie_word_embeddings", false);
  const std::string act = j.value("hidden_act", std::string("silu"));
  PARALLM_CHECK(act == "silu", IoError, kWhere, "{}: hidden_act \"{}\": the family's MLP is SwiGLU (silu)", path, act);
  PARALLM_CHECK(!flag(j, path, "mlp_bias", false), IoError, kWhere,
                "{}: mlp_bias true: parallm's SwiGLU MLP has no biases", path);
  // Qwen2 always has q, k, v biases; Llama's and Qwen3's attention_bias also puts one on o_proj.
  c.attention_bias = type == "qwen2";
  PARALLM_CHECK(type == "qwen2" || !flag(j, path, "attention_bias", false), IoError, kWhere,
                "{}: attention_bias true in a {} model also biases o_proj; parallm's model.attention_bias is "
                "Qwen2's (q, k and v)",
                path, type);
  read_rope_scaling(j, path, c);
  if (is_moe_type(type)) read_moe_config(j, path, type, c);
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw IoError(kWhere, fmt::format("{} describes a model parallm cannot build: {}", path, e.what()));
  }
  return c;
}

std::vector<float> load_hf_llama(const std::string& dir, const model::GPTConfig& cfg,
                                 const model::ParamLayout& layout) {
  const Weights w = open_weights(dir);
  const model::ParamLayout whole(cfg);
  std::set<std::string> names;
  for (const auto& s : whole.slots())
    for (const HfPiece& p : hf_pieces(cfg, s)) names.insert(p.name);
  for (const auto& [name, ft] : w.tensors) {
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;  // a buffer some files carry
    if (name == "lm_head.weight" && cfg.tie_embeddings) continue;         // checked below
    PARALLM_CHECK(names.count(name), IoError, kWhere, "{}: tensor \"{}\" is not a weight of the model ({})",
                  ft.first->path(), name, cfg.summary());
  }
  std::vector<float> out(static_cast<size_t>(layout.total()), 0.0f);
  for (int s = 0; s < static_cast<int>(layout.slots().size()); ++s) {
    const model::ParamSlot& slot = layout.slots()[static_cast<size_t>(s)];
    const auto g = whole_slot(w, dir, whole.find(slot.name), cfg);
    layout.slice(s, g.data(), out.data() + slot.offset);
  }
  const auto head = w.tensors.find("lm_head.weight");
  const auto table = w.tensors.find("model.embed_tokens.weight");
  if (head != w.tensors.end() && cfg.tie_embeddings && table != w.tensors.end()) {
    bool same = head->second.second->shape == table->second.second->shape;
    if (same) {
      std::vector<float> a(static_cast<size_t>(head->second.second->numel())), b(a.size());
      head->second.first->read(*head->second.second, a.data());
      table->second.first->read(*table->second.second, b.data());
      same = std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
        return std::memcmp(&x, &y, sizeof(float)) == 0;  // bitwise: a NaN equals itself
      });
    }
    PARALLM_CHECK(same, IoError, kWhere,
                  "{}: lm_head.weight is not model.embed_tokens.weight (an untied head), but the model ties them "
                  "(config.json's tie_word_embeddings)",
                  dir);
  }
  return out;
}

void export_hf_llama(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout,
                     const float* params, int64_t vocab_rows, const HfWriteOptions& o) {
  PARALLM_CHECK(layout.whole(), InternalError, kWhere, "export takes the whole model's layout");
  PARALLM_CHECK(vocab_rows > 0 && vocab_rows <= cfg.vocab_size, ConfigError, kWhere,
                "{} token rows of a model with model.vocab_size={}", vocab_rows, cfg.vocab_size);
  make_directories(dir, kWhere, "output directory");
  // Shards in layout order, each up to shard_bytes (one tensor may exceed it alone).
  std::vector<std::vector<StWrite>> shards(1);
  int64_t in_shard = 0, total = 0;
  const int64_t es = o.bf16 ? 2 : 4;
  for (const auto& s : layout.slots())
    for (HfPiece p : hf_pieces(cfg, s)) {
      if (s.name == "model.embed_tokens.weight" || s.name == "lm_head.weight") p.shape[0] = vocab_rows;
      int64_t bytes = es;
      for (int64_t d : p.shape) bytes *= d;
      if (in_shard > 0 && in_shard + bytes > o.shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back({p.name, p.shape, params + s.offset + p.offset, o.bf16});
      in_shard += bytes;
      total += bytes;
    }
  const size_t n = shards.size();
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < n; ++i) {
    const std::string file = n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
    write_safetensors((fs::path(dir) / file).string(), shards[i]);
    for (const auto& t : shards[i]) map[t.name] = file;
  }
  if (n > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    const std::string text = index.dump(2) + "\n";
    write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), {{text.data(), text.size()}});
  }
  const bool qwen3 = cfg.arch == model::Arch::Qwen3, qwen2 = !qwen3 && cfg.attention_bias;
  nlohmann::ordered_json c = {{"architectures",
                               {qwen3   ? "Qwen3ForCausalLM"
                                : qwen2 ? "Qwen2ForCausalLM"
                                        : "LlamaForCausalLM"}},
                              {"model_type", qwen3   ? "qwen3"
                                             : qwen2 ? "qwen2"
                                                     : "llama"},
                              {"vocab_size", vocab_rows},
                              {"hidden_size", cfg.n_embd},
                              {"intermediate_size", cfg.mlp_width()},
                              {"num_hidden_layers", cfg.n_layer},
                              {"num_attention_heads", cfg.n_head},
                              {"num_key_value_heads", cfg.kv_heads()},
                              {"head_dim", cfg.head_size()},
                              {"max_position_embeddings", cfg.block_size},
                              {"hidden_act", "silu"},
                              {"rms_norm_eps", cfg.rms_norm_eps},
                              {"rope_theta", cfg.rope_theta},
                              {"rope_scaling", nullptr},
                              {"attention_bias", false},
                              {"attention_dropout", 0.0},
                              {"mlp_bias", false},
                              {"tie_word_embeddings", cfg.tie_embeddings},
                              {"initializer_range", 0.02},
                              {"torch_dtype", o.bf16 ? "bfloat16" : "float32"}};
  if (cfg.rope_scaling.kind == model::RopeScaling::Kind::Llama3)
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", cfg.rope_scaling.factor},
                         {"low_freq_factor", cfg.rope_scaling.low_freq_factor},
                         {"high_freq_factor", cfg.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", cfg.rope_scaling.original}};
  if (qwen2) c.erase("attention_bias");  // Qwen2's q, k, v biases are its architecture's
  if (cfg.moe.experts > 0) write_moe_config(c, cfg);
  const std::string text = c.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "config.json").string(), {{text.data(), text.size()}});
}

}  // namespace parallm::hf
