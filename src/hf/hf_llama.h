// Hugging Face Llama / Qwen3 interop: a directory as transformers'
// LlamaForCausalLM and Qwen3ForCausalLM read and write it (config.json; the
// weights in model.safetensors, or sharded with model.safetensors.index.json;
// F32, BF16 or F16) to and from parallm's Llama family.
//
// parallm's slots carry Hugging Face's own names (model.layers.3.mlp.up_proj
// .weight) and orientation ([out, in]), so the table is the identity: each
// rank reads each tensor it holds a part of and keeps its slice (any tensor-
// or pipeline-parallel layout). The token table may gain rows
// (model.vocab_size above the file's: zero rows) and is cut to the
// vocabulary's real tokens when written. A tied head has no lm_head.weight;
// one that is read must equal the token table. Qwen2 directories (q, k, v
// biases) read as model.arch=llama with attention_bias.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace parallm::hf {

// Whether dir/config.json names a Llama-family model_type (llama, qwen2, qwen3).
bool is_llama_family(const std::string& dir);

// The model config.json describes: hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// max_position_embeddings (block_size), vocab_size, rope_theta, rope_scaling
// (none or llama3), rms_norm_eps, attention_bias, tie_word_embeddings.
// IoError naming the file and key when one is missing, of another kind, or
// something parallm does not build (another rope_scaling type, mlp_bias, an
// activation other than silu, Llama's o_proj bias).
model::GPTConfig hf_llama_config(const std::string& dir);

// The flat parameters of `layout` (any part of a model of config `cfg`).
// IoError naming the file and tensor when one is missing, has another shape,
// is not finite, or is not a weight of the model.
std::vector<float> load_hf_llama(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout);

struct HfWriteOptions {
  bool bf16 = false;                // weights as BF16 (config.json's torch_dtype bfloat16)
  int64_t shard_bytes = 4LL << 30;  // a new model-0000k-of-0000n.safetensors past this size
};
// Writes dir/config.json and the weights of the whole model `params`
// (layout.whole()), its token table cut to `vocab_rows` rows.
void export_hf_llama(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout,
                     const float* params, int64_t vocab_rows, const HfWriteOptions& o);

}  // namespace parallm::hf
