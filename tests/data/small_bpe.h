// A small byte-level BPE for tests that need one without GPT-2's files: the
// 256 bytes, merges that join across spaces and newlines, and <|endoftext|>
// (265 tokens).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "data/bpe.h"
#include "data/prepare.h"

namespace parallm::test_util {

inline data::Bpe small_bpe() {
  std::vector<std::pair<std::string, int32_t>> vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(data::gpt2_printable(std::string(1, static_cast<char>(b))), b);
  const std::vector<std::pair<std::string, std::string>> merges = {{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"Ċ", "Ċ"},
                                                                   {"e", "r"}, {"Ġ", "a"}, {"o", "u"},   {"Ġ", "Ġ"}};
  int32_t id = 256;
  for (const auto& [a, b] : merges) vocab.emplace_back(a + b, id++);
  vocab.emplace_back("<|endoftext|>", id);
  return data::Bpe::from_lists(vocab, merges, "small");
}

}  // namespace parallm::test_util
