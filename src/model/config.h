// GPT hyper-parameters, as nanoGPT names them.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/gelu.h"

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

// Activation recomputation (the other half of Megatron's sequence-parallel
// paper). Attention's probabilities and dropout masks are never stored in any
// mode (the attention kernels recompute them from the log-sum-exps). Selective
// also keeps no LayerNorm output and no GELU output (redone in backward from
// the stored residual and MLP pre-activation: no product is redone); full
// keeps only each block's input and redoes the whole block before its
// backward. Every mode gives the same bits.
enum class Recompute { None, Selective, Full };
const char* recompute_name(Recompute r);

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

  // Throws ConfigError naming the offending key.
  void validate() const;
  std::string summary() const;
  // Parameters (ParamLayout::count()) in closed form, saturating at
  // UINT64_MAX: cheap for any sizes, even ones validate() refuses.
  uint64_t num_params() const;
};

}  // namespace parallm::model
