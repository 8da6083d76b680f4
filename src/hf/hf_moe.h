// Hugging Face mixtures of experts (Qwen3MoeForCausalLM: model_type
// qwen3_moe; MixtralForCausalLM: mixtral) beside the Llama family's files
// (hf_llama.h): config.json's MoE fields, and the tensor names of parallm's
// stacked expert slots. Hugging Face keeps one tensor per expert
// (model.layers.{l}.mlp.experts.{e}.gate_proj.weight; Mixtral's
// block_sparse_moe.experts.{e}.w1 / w3 / w2 for gate / up / down, and its
// router block_sparse_moe.gate): each is a block of rows of the stacked slot.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace parallm::hf {

// One file tensor of a slot: its name, shape and first element in the slot's whole tensor.
struct HfPiece {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
};
// The file tensors slot `s` (of the whole layout of `cfg`) is made of: itself, or one per expert.
std::vector<HfPiece> hf_pieces(const model::GPTConfig& cfg, const model::ParamSlot& s);

// Whether `type` is an MoE model_type parallm reads.
bool is_moe_type(const std::string& type);
// config.json's MoE fields into c (the Llama keys already read): qwen3_moe's num_experts,
// num_experts_per_tok, moe_intermediate_size, norm_topk_prob, decoder_sparse_step, mlp_only_layers,
// router_aux_loss_coef; mixtral's num_local_experts (each expert intermediate_size wide, every layer).
// IoError naming the key where the MoE layers are no first + every k-th pattern parallm builds.
void read_moe_config(const nlohmann::json& j, const std::string& path, const std::string& type, model::GPTConfig& c);
// The same fields for cfg (an MoE model), and its architecture / model_type.
void write_moe_config(nlohmann::ordered_json& j, const model::GPTConfig& cfg);

}  // namespace parallm::hf
