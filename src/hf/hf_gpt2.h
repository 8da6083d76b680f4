// Hugging Face GPT-2 interop: a directory as transformers' GPT2LMHeadModel
// reads and writes it (config.json, model.safetensors, and the tokenizer's
// vocab.json + merges.txt) to and from parallm's GPT.
//
// The name table: parallm's slots carry nanoGPT's names
// ("transformer.h.3.mlp.c_fc.weight"); a file holds the same names, with or
// without "transformer." (the hub's gpt2 has none, save_pretrained writes
// it). Four weights are Conv1D in Hugging Face, stored [in, out], the
// transpose of parallm's [out, in]: attn.c_attn, attn.c_proj, mlp.c_fc,
// mlp.c_proj. A tied head (tie_word_embeddings true, GPT-2's) is wte: no
// lm_head.weight is written, and one that is read must equal wte; an untied
// one (model.tie_embeddings=false) is lm_head.weight, cut and padded by rows
// as wte is. The causal-mask buffers some files carry
// (attn.bias, attn.masked_bias) are not weights and are skipped. Reading,
// the token table may gain rows (model.vocab_size above the file's: the
// padding rows are zero) and the position table may lose some
// (model.block_size below n_positions: the first rows); writing, the token
// table is cut to the vocabulary's real tokens. A model without biases is
// written with zero biases (Hugging Face's GPT-2 always has them).
#pragma once
#include <string>
#include <vector>

#include "data/bpe.h"
#include "model/config.h"
#include "model/params.h"

namespace parallm::hf {

// The model config.json describes: n_layer, n_head, n_embd, block_size
// (n_positions), vocab_size, bias (always), gelu ("gelu_new" and
// "gelu_pytorch_tanh": tanh; "gelu": exact). IoError naming the file and key
// when one is missing or not what GPT-2's config holds.
model::GPTConfig hf_gpt2_config(const std::string& dir);

// The flat parameters of `layout` (any tensor- or pipeline-parallel part of
// a GPT of config `cfg`) from dir/model.safetensors, F32, BF16 or F16.
// IoError naming the tensor when one is missing, has another shape, or is
// not a weight of GPT-2; the file's own checks as safetensors.h.
std::vector<float> load_hf_gpt2(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout);

// Writes dir/config.json and dir/model.safetensors for the whole model
// `params` (layout.whole()), its token table cut to `vocab_rows` rows, and,
// when `bpe` is given, its tokenizer (vocab.json, merges.txt,
// tokenizer_config.json).
void export_hf_gpt2(const std::string& dir, const model::GPTConfig& cfg, const model::ParamLayout& layout,
                    const float* params, int64_t vocab_rows, const data::Bpe* bpe);

}  // namespace parallm::hf
