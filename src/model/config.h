// A model's hyper-parameters: GPT-2's as nanoGPT names them, and the keys the
// Llama family adds (Llama 3, Qwen3; named as Hugging Face's config.json
// names them). `arch` picks the block's layers: GPT-2's LayerNorm, learned
// positions and GELU MLP, or Llama's RMSNorm, rotary positions, grouped-query
// attention and SwiGLU MLP (Qwen3: with per-head QK-norm).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/gelu.h"
#include "kernels/moe.h"

namespace parallm::model {

// Upper bounds of the model's sizes (the keys' documented valid ranges, shown
// by `parallm train --help-keys`). Far above any model trained today, they
// keep every size product in int64 and the layout's per-layer bookkeeping in
// megabytes; whether a model within them fits is a separate, computed check.
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;     // model.n_layer
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;      // model.n_head
inline constexpr int64_t kMaxEmbd = int64_t{1} << 20;       // model.n_embd
inline constexpr int64_t kMaxBlockSize = int64_t{1} << 20;  // model.block_size
inline constexpr int64_t kMaxVocab = INT32_MAX;             // model.vocab_size (token ids are int32)
inline constexpr int64_t kMaxExperts = 1024;                // model.moe_experts (the routing kernels' bound)

// Activation recomputation (the other half of Megatron's sequence-parallel
// paper). Attention's probabilities and dropout masks are never stored in any
// mode (the attention kernels recompute them from the log-sum-exps). Selective
// also keeps no LayerNorm output and no GELU output (redone in backward from
// the stored residual and MLP pre-activation: no product is redone); full
// keeps only each block's input and redoes the whole block before its
// backward. Every mode gives the same bits.
enum class Recompute { None, Selective, Full };
const char* recompute_name(Recompute r);

enum class Arch { Gpt2, Llama, Qwen3 };
const char* arch_name(Arch a);
// ConfigError naming `key` unless `name` is gpt2, llama or qwen3.
Arch parse_arch(const std::string& name, const std::string& key);

// Rotary embeddings' frequency scaling (Hugging Face's rope_scaling): none,
// or Llama 3's (low frequencies divided by `factor`, high ones kept, a smooth
// blend between; `original` is original_max_position_embeddings).
struct RopeScaling {
  enum class Kind { None, Llama3 } kind = Kind::None;
  double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original = 8192;
  bool operator==(const RopeScaling&) const = default;
};
const char* rope_scaling_name(RopeScaling::Kind k);
RopeScaling::Kind parse_rope_scaling(const std::string& name, const std::string& key);

// A mixture of experts in place of the MLP of some blocks (Llama family):
// a router, `experts` SwiGLU experts of width `intermediate` each token uses
// `top_k` of, optional shared experts every token uses, and the routing's
// balancing terms (docs/moe.md has the formulas).
struct MoeConfig {
  int64_t experts = 0;  // 0: dense (no MoE)
  int64_t top_k = 2;
  int64_t intermediate = 0;  // each expert's hidden width (0: intermediate_size)
  int64_t shared = 0;        // shared experts: one SwiGLU MLP of shared x intermediate
  kernels::MoeScore score = kernels::MoeScore::Softmax;
  bool norm_topk = true;  // the chosen experts' weights normalized to sum 1
  double routed_scale = 1.0;
  double aux_coef = 0.0;  // the load-balancing loss's coefficient
  double z_coef = 0.0;    // the router z-loss's coefficient
  int64_t first = 0;      // the first MoE layer (earlier ones dense) ...
  int64_t every = 1;      // ... and every `every`-th after it
  bool bias = false;      // DeepSeek's score-correction bias (selection only)
  // Capacity factor (0: dropless): in a training pass each expert takes at
  // most ceil(capacity T K / E) choices of each sequence, in position order;
  // the rest are dropped (they add nothing; the residual carries the token).
  double capacity = 0.0;
  // DeepSeek-V3's auxiliary-loss-free balancing (with `bias`): after each
  // optimizer step every expert's selection bias moves by this rate toward
  // balance, +rate below the layer's mean load, -rate above it (0: fixed).
  double bias_rate = 0.0;
  bool operator==(const MoeConfig&) const = default;
};

struct GPTConfig {
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  int64_t block_size = 256;
  int64_t vocab_size = 65;
  bool bias = false;
  float dropout = 0.0f;
  kernels::GeluKind gelu = kernels::GeluKind::Exact;
  Recompute recompute = Recompute::None;  // how the model trades compute for activation memory
  // The LM head shares the token table (GPT-2's tied embeddings); false: a
  // head matrix of its own (lm_head.weight), on the last pipeline stage.
  bool tie_embeddings = true;

  // The Llama family (arch llama or qwen3; 0 = the default named).
  Arch arch = Arch::Gpt2;
  int64_t n_kv_head = 0;          // KV heads (0: n_head)
  int64_t head_dim = 0;           // 0: n_embd / n_head
  int64_t intermediate_size = 0;  // the MLP's hidden width (0: 4 n_embd)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  float rms_norm_eps = 1e-5f;
  bool attention_bias = false;  // biases on q, k and v (Qwen2-style)
  MoeConfig moe;

  bool moe_layer(int64_t l) const { return moe.experts > 0 && l >= moe.first && (l - moe.first) % moe.every == 0; }
  int64_t moe_layers() const;
  int64_t expert_width() const { return moe.intermediate > 0 ? moe.intermediate : mlp_width(); }

  bool llama() const { return arch != Arch::Gpt2; }
  bool qk_norm() const { return arch == Arch::Qwen3; }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  int64_t attn_width() const { return n_head * head_size(); }
  int64_t mlp_width() const { return intermediate_size > 0 ? intermediate_size : 4 * n_embd; }

  // Throws ConfigError naming the offending key.
  void validate() const;
  std::string summary() const;
  // Parameters (ParamLayout::count()) in closed form, saturating at
  // UINT64_MAX: cheap for any sizes, even ones validate() refuses.
  uint64_t num_params() const;
  // The parameters a token uses (MoE: top_k of the experts; dense: num_params()).
  uint64_t active_params() const;
};

// A block's widths on one rank of a tensor-parallel group of `tp` (whole for
// tp = 1). The KV heads are split like the query heads where tp divides
// them; where they divide tp (fewer KV heads than ranks) each rank computes
// the one KV head its query heads use, from projections every rank holds whole.
struct BlockWidths {
  int64_t C = 0;           // the residual width (n_embd)
  int64_t heads = 0;       // this rank's query heads
  int64_t kv_heads = 0;    // this rank's KV heads (1 where replicated)
  int64_t D = 0;           // head size
  int64_t mlp = 0;         // this rank's MLP hidden columns
  int64_t expert = 0;      // this rank's hidden columns of each expert (MoE)
  int64_t shared = 0;      // ... and of the shared experts
  int64_t first_head = 0;  // this rank's first query head
  int64_t first_kv = 0;    // the first KV head it computes
  bool kv_whole = false;   // KV projections replicated (tp > n_kv_head)
  int64_t attn() const { return heads * D; }
  int64_t kv() const { return kv_heads * D; }
};
// ConfigError where the heads, KV heads or MLP width do not split over tp.
BlockWidths block_widths(const GPTConfig& cfg, int tp, int rank = 0);

}  // namespace parallm::model
