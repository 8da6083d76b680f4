// Hugging Face MoE directories' names and fields (hf_moe.h).
#include "hf/hf_moe.h"

#include <set>

#include "core/error.h"

namespace parallm::hf {

namespace {
constexpr const char* kMoeWhere = "hf";

bool moe_ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

int64_t moe_count(const nlohmann::json& j, const std::string& path, const char* key, int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) {
    PARALLM_CHECK(fallback >= 0, IoError, kMoeWhere, "{} has no {}", path, key);
    return fallback;
  }
  PARALLM_CHECK(j[key].is_number_unsigned(), IoError, kMoeWhere, "{}: {} is {}, not a count", path, key, j[key].dump());
  return j[key].get<int64_t>();
}
}  // namespace

bool is_moe_type(const std::string& type) {
  return type == "qwen3_moe" || type == "mixtral";
}

std::vector<HfPiece> hf_pieces(const model::GPTConfig& cfg, const model::ParamSlot& s) {
  const std::vector<int64_t> whole(s.global_shape.begin(), s.global_shape.end());
  if (cfg.moe.experts == 0) return {{s.name, whole, 0}};
  const bool mixtral = cfg.arch == model::Arch::Llama;
  const std::string tails[3] = {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight",
                                "mlp.experts.down_proj.weight"};
  const char* mixtral_names[3] = {"w1", "w3", "w2"};
  const char* qwen_names[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int i = 0; i < 3; ++i) {
    if (!moe_ends_with(s.name, tails[i])) continue;
    const std::string prefix = s.name.substr(0, s.name.size() - tails[i].size());
    const int64_t E = cfg.moe.experts, rows = whole[0] / E, cols = whole[1];
    std::vector<HfPiece> out;
    for (int64_t e = 0; e < E; ++e)
      out.push_back({mixtral ? fmt::format("{}block_sparse_moe.experts.{}.{}.weight", prefix, e, mixtral_names[i])
                             : fmt::format("{}mlp.experts.{}.{}.weight", prefix, e, qwen_names[i]),
                     {rows, cols},
                     e * rows * cols});
    return out;
  }
  if (mixtral && moe_ends_with(s.name, "mlp.gate.weight"))
    return {{s.name.substr(0, s.name.size() - 15) + "block_sparse_moe.gate.weight", whole, 0}};
  return {{s.name, whole, 0}};
}

void read_moe_config(const nlohmann::json& j, const std::string& path, const std::string& type, model::GPTConfig& c) {
  model::MoeConfig& m = c.moe;
  m.top_k = moe_count(j, path, "num_experts_per_tok", -1);
  m.aux_coef = j.value("router_aux_loss_coef", 0.0);
  if (type == "mixtral") {  // every layer, each expert intermediate_size wide, the top-k renormalized
    m.experts = moe_count(j, path, "num_local_experts", -1);
    m.intermediate = c.intermediate_size;
    m.norm_topk = true;
    return;
  }
  m.experts = moe_count(j, path, "num_experts", -1);
  m.intermediate = moe_count(j, path, "moe_intermediate_size", -1);
  m.norm_topk = j.value("norm_topk_prob", false);
  // Qwen3-MoE's sparse layers: not in mlp_only_layers, and (l + 1) % decoder_sparse_step == 0.
  const int64_t step = std::max<int64_t>(1, moe_count(j, path, "decoder_sparse_step", 1));
  std::set<int64_t> dense;
  if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array())
    for (const auto& v : j["mlp_only_layers"]) dense.insert(v.get<int64_t>());
  std::vector<int64_t> sparse;
  for (int64_t l = 0; l < c.n_layer; ++l)
    if (!dense.count(l) && (l + 1) % step == 0) sparse.push_back(l);
  PARALLM_CHECK(!sparse.empty(), IoError, kMoeWhere, "{}: no MoE layer (mlp_only_layers, decoder_sparse_step)", path);
  m.first = sparse[0];
  m.every = sparse.size() > 1 ? sparse[1] - sparse[0] : c.n_layer;
  for (int64_t l = 0; l < c.n_layer; ++l)
    PARALLM_CHECK(c.moe_layer(l) == std::binary_search(sparse.begin(), sparse.end(), l), IoError, kMoeWhere,
                  "{}: the MoE layers (mlp_only_layers, decoder_sparse_step) are not a first layer and every k-th "
                  "after it, which is what parallm builds (model.moe_first_layer, model.moe_every)",
                  path);
}

void write_moe_config(nlohmann::ordered_json& j, const model::GPTConfig& cfg) {
  const model::MoeConfig& m = cfg.moe;
  const bool mixtral = cfg.arch == model::Arch::Llama;
  auto only = [&](bool ok, const char* key, const char* what) {
    PARALLM_CHECK(ok, ConfigError, kMoeWhere, "{}: {} has no such field; {} exports need {}", key,
                  mixtral ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM", mixtral ? "Mixtral" : "Qwen3-MoE", what);
  };
  only(m.shared == 0, "model.moe_shared_experts", "none");
  only(m.score == kernels::MoeScore::Softmax, "model.moe_score", "softmax");
  only(m.routed_scale == 1.0, "model.moe_routed_scale", "1");
  only(!m.bias, "model.moe_bias", "false");
  only(!mixtral || (m.norm_topk && m.first == 0 && m.every == 1), "model.moe_norm_topk / moe_first_layer / moe_every",
       "the top-k renormalized on every layer");
  j["num_experts_per_tok"] = m.top_k;
  j["router_aux_loss_coef"] = m.aux_coef;
  j["output_router_logits"] = false;
  if (cfg.arch == model::Arch::Llama) {
    j["architectures"] = {"MixtralForCausalLM"};
    j["model_type"] = "mixtral";
    j["num_local_experts"] = m.experts;
    j["intermediate_size"] = cfg.expert_width();
    j["sliding_window"] = nullptr;
    return;
  }
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["model_type"] = "qwen3_moe";
  j["num_experts"] = m.experts;
  j["moe_intermediate_size"] = cfg.expert_width();
  j["norm_topk_prob"] = m.norm_topk;
  j["decoder_sparse_step"] = 1;
  nlohmann::json dense = nlohmann::json::array();
  for (int64_t l = 0; l < cfg.n_layer; ++l)
    if (!cfg.moe_layer(l)) dense.push_back(l);
  j["mlp_only_layers"] = dense;
}

}  // namespace parallm::hf
