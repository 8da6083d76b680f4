// The vocabulary of a prepared dataset, read from its meta.json: encodes
// prompts, decodes samples. Two kinds:
//   characters  (prepare shakespeare_char | char): an "itos" list, the
//               character of each id, as nanoGPT's meta.pkl;
//   byte-level BPE (prepare shakespeare | gpt2 | bpe): "tokenizer" names the
//               kind ("gpt2", "bpe", "tokenizer.json", "tiktoken") and "bpe"
//               holds the tokenizer itself (Bpe::definition(): for GPT-2's
//               kind tokenizer.json's model object, vocab and merges; else
//               the whole tokenizer.json, or the tiktoken ranks, pattern and
//               special tokens), so that meta.json alone, as a run directory
//               keeps a copy of it, is all sampling and export need.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/bpe.h"

namespace parallm::data {

class Vocab {
 public:
  // Reads data_dir/meta.json, strictly: a character list of one-character
  // strings, no character twice, as many as its vocab_size; or a BPE
  // tokenizer of vocab_size tokens (IoError naming the entry).
  static Vocab load(const std::string& data_dir);
  // The same from a parsed meta.json (`path` names it in errors).
  static Vocab of_meta(const nlohmann::json& meta, const std::string& path);
  static Vocab of_bpe(std::shared_ptr<const Bpe> bpe);

  int64_t size() const;
  bool is_bpe() const { return bpe_ != nullptr; }
  const Bpe* bpe() const { return bpe_.get(); }
  // "65 characters", "50257 BPE tokens".
  std::string describe() const;
  bool operator==(const Vocab& o) const;
  // Characters: ConfigError naming the first character not in the vocabulary.
  // BPE: any UTF-8 text ("<|endoftext|>" is its token).
  std::vector<int32_t> encode(const std::string& text) const;
  // The text of the tokens (BPE: their bytes, which a token cut mid-character
  // leaves not valid UTF-8 until the next); an id outside gives U+FFFD.
  std::string decode(const std::vector<int32_t>& tokens) const;

 private:
  std::vector<char32_t> itos_;
  std::map<char32_t, int32_t> stoi_;
  std::shared_ptr<const Bpe> bpe_;
};

}  // namespace parallm::data
