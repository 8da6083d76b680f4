// GPT hyper-parameters, as nanoGPT names them.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/gelu.h"

namespace parallm::model {

struct GPTConfig {
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  int64_t block_size = 256;
  int64_t vocab_size = 65;
  bool bias = false;
  float dropout = 0.0f;
  kernels::GeluKind gelu = kernels::GeluKind::Exact;

  // Throws ConfigError naming the offending key.
  void validate() const;
  std::string summary() const;
};

}  // namespace parallm::model
