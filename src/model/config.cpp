// The model configuration's checks, sizes and names (config.h): every rule
// between the model's keys is here, each error naming the key.
#include "model/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "core/host.h"

namespace parallm::model {

namespace {
std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

void require_in(int64_t value, int64_t hi, const char* key) {
  PARALLM_CHECK(value >= 1 && value <= hi, ConfigError, "config",
                "{} must be in [1, {}], got {}; `parallm train --help-keys` lists every key's range", key, hi, value);
}

void validate_llama(const GPTConfig& c) {
  PARALLM_CHECK(c.n_kv_head >= 0 && c.n_kv_head <= c.n_head, ConfigError, "config",
                "model.n_kv_head must be in [1, model.n_head={}] (0: n_head), got {}", c.n_head, c.n_kv_head);
  PARALLM_CHECK(c.n_head % c.kv_heads() == 0, ConfigError, "config",
                "model.n_head ({}) must be a multiple of model.n_kv_head ({}): each KV head serves a whole group of "
                "query heads",
                c.n_head, c.kv_heads());
  PARALLM_CHECK(c.head_dim >= 0 && c.head_dim <= kMaxEmbd, ConfigError, "config",
                "model.head_dim must be in [1, {}] (0: n_embd / n_head), got {}", kMaxEmbd, c.head_dim);
  PARALLM_CHECK(c.head_dim > 0 || c.n_embd % c.n_head == 0, ConfigError, "config",
                "model.n_embd ({}) is not divisible by model.n_head ({}); set model.head_dim", c.n_embd, c.n_head);
  PARALLM_CHECK(c.head_size() % 2 == 0, ConfigError, "config",
                "model.head_dim ({}) must be even: rotary embeddings rotate pairs of a head's channels", c.head_size());
  PARALLM_CHECK(c.intermediate_size >= 0 && c.intermediate_size <= 16 * kMaxEmbd, ConfigError, "config",
                "model.intermediate_size must be in [1, {}] (0: 4 n_embd), got {}", 16 * kMaxEmbd, c.intermediate_size);
  PARALLM_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 1.0, ConfigError, "config",
                "model.rope_theta must be a finite number above 1, got {}", c.rope_theta);
  PARALLM_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0.0f && c.rms_norm_eps < 1.0f, ConfigError, "config",
                "model.rms_norm_eps must be in (0, 1), got {}", c.rms_norm_eps);
  PARALLM_CHECK(!c.bias, ConfigError, "config",
                "model.bias=true is GPT-2's (biases everywhere); model.arch={} has none, or q, k and v biases with "
                "model.attention_bias=true",
                arch_name(c.arch));
  const RopeScaling& r = c.rope_scaling;
  if (r.kind == RopeScaling::Kind::Llama3) {
    PARALLM_CHECK(std::isfinite(r.factor) && r.factor >= 1.0, ConfigError, "config",
                  "model.rope_factor must be at least 1, got {}", r.factor);
    PARALLM_CHECK(std::isfinite(r.low_freq_factor) && std::isfinite(r.high_freq_factor) && r.low_freq_factor > 0 &&
                      r.high_freq_factor > r.low_freq_factor,
                  ConfigError, "config",
                  "model.rope_high_freq_factor ({}) must be above model.rope_low_freq_factor ({}) > 0",
                  r.high_freq_factor, r.low_freq_factor);
    require_in(r.original, kMaxBlockSize, "model.rope_original_max_position_embeddings");
  }
}

void validate_moe(const GPTConfig& c) {
  const MoeConfig& m = c.moe;
  PARALLM_CHECK(m.experts >= 0 && m.experts <= kMaxExperts, ConfigError, "config",
                "model.moe_experts must be in [0, {}] (0: dense), got {}", kMaxExperts, m.experts);
  if (m.experts == 0) return;
  PARALLM_CHECK(c.llama(), ConfigError, "config",
                "model.moe_experts={}: mixtures of experts are built for model.arch=llama|qwen3 (SwiGLU experts), not "
                "{}",
                m.experts, arch_name(c.arch));
  PARALLM_CHECK(m.top_k >= 1 && m.top_k <= m.experts, ConfigError, "config",
                "model.moe_top_k={} must be in [1, model.moe_experts={}]: each token chooses that many experts",
                m.top_k, m.experts);
  PARALLM_CHECK(m.intermediate >= 0 && m.intermediate <= 16 * kMaxEmbd, ConfigError, "config",
                "model.moe_intermediate_size must be in [1, {}] (0: model.intermediate_size), got {}", 16 * kMaxEmbd,
                m.intermediate);
  PARALLM_CHECK(m.shared >= 0 && m.shared <= m.experts, ConfigError, "config",
                "model.moe_shared_experts must be in [0, model.moe_experts={}], got {}", m.experts, m.shared);
  PARALLM_CHECK(std::isfinite(m.routed_scale) && m.routed_scale > 0, ConfigError, "config",
                "model.moe_routed_scale must be a positive number, got {}", m.routed_scale);
  PARALLM_CHECK(std::isfinite(m.aux_coef) && m.aux_coef >= 0, ConfigError, "config",
                "model.moe_aux_coef must be >= 0, got {}", m.aux_coef);
  PARALLM_CHECK(std::isfinite(m.z_coef) && m.z_coef >= 0, ConfigError, "config",
                "model.moe_z_coef must be >= 0, got {}", m.z_coef);
  PARALLM_CHECK(m.first >= 0 && m.first < c.n_layer, ConfigError, "config",
                "model.moe_first_layer={} must be a layer of the model's {} (0: every layer from the first)", m.first,
                c.n_layer);
  PARALLM_CHECK(m.every >= 1, ConfigError, "config", "model.moe_every must be >= 1, got {}", m.every);
  PARALLM_CHECK(std::isfinite(m.capacity) && m.capacity >= 0, ConfigError, "config",
                "model.moe_capacity_factor must be >= 0 (0: dropless), got {}", m.capacity);
  PARALLM_CHECK(std::isfinite(m.bias_rate) && m.bias_rate >= 0, ConfigError, "config",
                "model.moe_bias_update_rate must be >= 0 (0: the bias stays), got {}", m.bias_rate);
  PARALLM_CHECK(m.bias_rate == 0 || m.bias, ConfigError, "config",
                "model.moe_bias_update_rate={} moves the experts' selection bias, which model.moe_bias=false leaves "
                "out; set model.moe_bias=true",
                m.bias_rate);
  PARALLM_CHECK(c.recompute == Recompute::None, ConfigError, "config",
                "model.recompute={} with model.moe_experts={}: recomputing a mixture of experts is not built yet; use "
                "model.recompute=none",
                recompute_name(c.recompute), m.experts);
}

void validate_gpt2(const GPTConfig& c) {
  PARALLM_CHECK(c.n_embd % c.n_head == 0, ConfigError, "config",
                "model.n_embd ({}) must be divisible by model.n_head ({})", c.n_embd, c.n_head);
  auto unused = [&](bool set, const char* key) {
    PARALLM_CHECK(!set, ConfigError, "config",
                  "{} is a key of model.arch=llama|qwen3; model.arch=gpt2 does not take it", key);
  };
  unused(c.n_kv_head != 0 && c.n_kv_head != c.n_head, "model.n_kv_head");
  unused(c.head_dim != 0 && c.head_dim != c.n_embd / c.n_head, "model.head_dim");
  unused(c.intermediate_size != 0 && c.intermediate_size != 4 * c.n_embd, "model.intermediate_size");
  unused(c.rope_scaling.kind != RopeScaling::Kind::None, "model.rope_scaling");
  unused(c.attention_bias, "model.attention_bias");
}
}  // namespace

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Gpt2:
      return "gpt2";
    case Arch::Llama:
      return "llama";
    case Arch::Qwen3:
      return "qwen3";
  }
  return "?";
}

Arch parse_arch(const std::string& name, const std::string& key) {
  const std::string l = lower(name);
  if (l == "gpt2") return Arch::Gpt2;
  if (l == "llama") return Arch::Llama;
  if (l == "qwen3") return Arch::Qwen3;
  throw ConfigError("config", fmt::format("{}: expected gpt2, llama or qwen3, got \"{}\"", key, name));
}

const char* rope_scaling_name(RopeScaling::Kind k) {
  return k == RopeScaling::Kind::Llama3 ? "llama3" : "none";
}

RopeScaling::Kind parse_rope_scaling(const std::string& name, const std::string& key) {
  const std::string l = lower(name);
  if (l == "none" || l == "default") return RopeScaling::Kind::None;
  if (l == "llama3") return RopeScaling::Kind::Llama3;
  throw ConfigError("config",
                    fmt::format("{}: unknown rope scaling type \"{}\" (parallm knows none and llama3)", key, name));
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "?";
}

void GPTConfig::validate() const {
  require_in(n_layer, kMaxLayers, "model.n_layer");
  require_in(n_head, kMaxHeads, "model.n_head");
  require_in(n_embd, kMaxEmbd, "model.n_embd");
  require_in(block_size, kMaxBlockSize, "model.block_size");
  require_in(vocab_size, kMaxVocab, "model.vocab_size");
  PARALLM_CHECK(dropout >= 0.0f && dropout < 1.0f, ConfigError, "config", "model.dropout must be in [0, 1), got {}",
                dropout);
  if (llama())
    validate_llama(*this);
  else
    validate_gpt2(*this);
  validate_moe(*this);
}

int64_t GPTConfig::moe_layers() const {
  if (moe.experts <= 0 || moe.first >= n_layer || moe.every < 1) return 0;
  return (n_layer - 1 - moe.first) / moe.every + 1;
}

uint64_t GPTConfig::num_params() const {
  auto u = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); };
  const uint64_t C = u(n_embd), L = u(n_layer), V = u(vocab_size);
  uint64_t block = 0, n = 0;
  if (llama()) {
    // q, k, v, o; gate, up, down; two RMSNorm weights; q/k biases; QK-norm weights.
    const uint64_t A = sat_mul(u(n_head), u(head_size())), K = sat_mul(u(kv_heads()), u(head_size()));
    block = sat_mul(C, sat_add(sat_mul(2, A), sat_mul(2, K)));
    block = sat_add(block, sat_add(sat_mul(2, C), attention_bias ? sat_add(A, sat_mul(2, K)) : 0));
    if (qk_norm()) block = sat_add(block, sat_mul(2, u(head_size())));
    n = sat_add(sat_mul(V, C), C);  // the token table, the final norm
    // The MLPs: dense gate, up, down; MoE the router, its bias, the experts and the shared experts.
    const uint64_t moe_l = u(moe_layers()), dense_l = L - std::min(L, moe_l), Fe = u(expert_width());
    n = sat_add(n, sat_mul(dense_l, sat_mul(3, sat_mul(C, u(mlp_width())))));
    const uint64_t experts = sat_add(u(moe.experts), u(moe.shared));
    uint64_t moe_mlp = sat_add(sat_mul(u(moe.experts), C), sat_mul(3, sat_mul(experts, sat_mul(C, Fe))));
    if (moe.bias) moe_mlp = sat_add(moe_mlp, u(moe.experts));
    n = sat_add(n, sat_mul(moe_l, moe_mlp));
  } else {
    // Per block: qkv 3C^2, proj C^2, fc 4C^2, fc proj 4C^2, two LayerNorm weights; biases 11C.
    block = sat_add(sat_mul(12, sat_mul(C, C)), sat_mul(bias ? 13 : 2, C));
    n = sat_add(sat_mul(sat_add(V, u(block_size)), C), sat_mul(bias ? 2 : 1, C));  // wte, wpe, ln_f
  }
  n = sat_add(n, sat_mul(L, block));
  if (!tie_embeddings) n = sat_add(n, sat_mul(V, C));  // lm_head
  return n;
}

uint64_t GPTConfig::active_params() const {
  const uint64_t all = num_params();
  if (moe.experts <= 0) return all;
  auto u = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); };
  const uint64_t idle =
      sat_mul(u(moe_layers()), sat_mul(u(moe.experts - moe.top_k), sat_mul(3, sat_mul(u(n_embd), u(expert_width())))));
  return all - std::min(all, idle);
}

std::string GPTConfig::summary() const {
  std::string s = fmt::format("n_layer={} n_head={} n_embd={} block_size={} vocab_size={}", n_layer, n_head, n_embd,
                              block_size, vocab_size);
  if (llama()) {
    s += fmt::format(" arch={} n_kv_head={} head_dim={} intermediate_size={} rope_theta={}", arch_name(arch),
                     kv_heads(), head_size(), mlp_width(), rope_theta);
    if (rope_scaling.kind != RopeScaling::Kind::None)
      s += fmt::format(" rope_scaling={}(factor={}, low={}, high={}, original={})",
                       rope_scaling_name(rope_scaling.kind), rope_scaling.factor, rope_scaling.low_freq_factor,
                       rope_scaling.high_freq_factor, rope_scaling.original);
    if (attention_bias) s += " attention_bias=true";
    if (moe.experts > 0)
      s += fmt::format(" moe_experts={} moe_top_k={} moe_intermediate_size={} moe_shared_experts={} moe_score={}{}{}",
                       moe.experts, moe.top_k, expert_width(), moe.shared,
                       moe.score == kernels::MoeScore::Softmax ? "softmax" : "sigmoid",
                       moe.first || moe.every > 1 ? fmt::format(" moe layers {}+{}k", moe.first, moe.every) : "",
                       moe.bias ? " moe_bias=true" : "") +
           (moe.capacity > 0 ? fmt::format(" moe_capacity_factor={}", moe.capacity) : "") +
           (moe.bias_rate > 0 ? fmt::format(" moe_bias_update_rate={}", moe.bias_rate) : "");
  } else {
    s += fmt::format(" bias={}", bias);
  }
  s += fmt::format(" dropout={}", dropout);
  if (recompute != Recompute::None) s += fmt::format(" recompute={}", recompute_name(recompute));
  if (!tie_embeddings) s += " tie_embeddings=false";
  return s;
}

BlockWidths block_widths(const GPTConfig& c, int tp, int rank) {
  PARALLM_CHECK(c.n_head % tp == 0, ConfigError, "config",
                "model.n_head={} is not divisible by parallel.tp={}: tensor parallelism splits attention by heads",
                c.n_head, tp);
  const int64_t KV = c.kv_heads();
  PARALLM_CHECK(KV % tp == 0 || tp % KV == 0, ConfigError, "config",
                "model.n_kv_head={} and parallel.tp={}: tensor parallelism splits the KV heads (n_kv_head a multiple "
                "of tp) or gives each rank one of them (tp a multiple of n_kv_head)",
                KV, tp);
  PARALLM_CHECK(c.mlp_width() % tp == 0, ConfigError, "config",
                "model.intermediate_size={} is not divisible by parallel.tp={}: tensor parallelism splits the MLP's "
                "hidden columns",
                c.mlp_width(), tp);
  const int64_t shared = c.moe.shared * c.expert_width();
  PARALLM_CHECK(c.moe.experts == 0 || (c.expert_width() % tp == 0), ConfigError, "config",
                "model.moe_intermediate_size={} is not divisible by parallel.tp={}: tensor parallelism splits each "
                "expert's hidden columns",
                c.expert_width(), tp);
  BlockWidths w;
  w.C = c.n_embd;
  if (c.moe.experts > 0) {
    w.expert = c.expert_width() / tp;
    w.shared = shared / tp;
  }
  w.heads = c.n_head / tp;
  w.D = c.head_size();
  w.mlp = c.mlp_width() / tp;
  w.first_head = rank * w.heads;
  w.kv_whole = KV < tp;
  w.kv_heads = w.kv_whole ? 1 : KV / tp;
  w.first_kv = w.kv_whole ? rank / (tp / KV) : rank * w.kv_heads;
  return w;
}

}  // namespace parallm::model
