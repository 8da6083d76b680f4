// GPT-2's byte-level BPE tokenizer (issue 35): ids exactly as OpenAI's
// encoder.py and tiktoken's "gpt2" encoding give them.
//
// Design: encoding is two steps. pretokenize() cuts the text into pieces by
// GPT-2's pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), written out as a matcher over code points
// (std::regex has neither \p{..} nor the look-ahead); letters, numbers and
// white space are Unicode's (ICU). Then each piece's bytes start as one symbol
// per byte and the adjacent pair with the lowest merge rank is merged
// everywhere in the piece, again and again, as encoder.py does. The tables
// (the byte of each single-byte token, the bytes of every token, the pair ->
// rank and merged id map) are built once from the standard files: OpenAI's
// encoder.json + vocab.bpe, Hugging Face's vocab.json + merges.txt, or
// tokenizer.json. Tokens are written in GPT-2's printable alphabet (each byte
// one code point, byte_to_unicode()); the tables hold raw bytes.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace parallm::data {

// The pieces of `text` (valid UTF-8, else ConfigError) by GPT-2's pattern;
// they tile the text in order.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

// GPT-2's printable code point of each byte (byte 0x20 -> U+0120 "Ġ", ...).
const std::array<char32_t, 256>& byte_to_unicode();
// Raw bytes in that alphabet, as the tokenizer files write tokens.
std::string gpt2_printable(std::string_view bytes);

class Bpe {
 public:
  // The tokenizer files in `dir`: tokenizer.json, or vocab.json + merges.txt,
  // or encoder.json + vocab.bpe (the first found). IoError naming the file
  // and entry when one is malformed or inconsistent.
  static Bpe load_dir(const std::string& dir);
  // Whether `dir` holds tokenizer files load_dir() reads (a character model's
  // Hugging Face export has none).
  static bool dir_has_tokenizer(const std::string& dir);
  // A token -> id table (vocab.json / encoder.json) and the merges file.
  static Bpe load_files(const std::string& vocab_json, const std::string& merges_txt);
  static Bpe load_tokenizer_json(const std::string& path);
  // tokenizer.json's "model" object ({"type": "BPE", "vocab": {...}, "merges": [...]}),
  // as model_json() writes it; `what` names it in errors.
  static Bpe from_model_json(const nlohmann::json& model, const std::string& what);
  // From the (token text, id) pairs and the merges (token texts) in rank order.
  static Bpe from_lists(const std::vector<std::pair<std::string, int32_t>>& vocab,
                        const std::vector<std::pair<std::string, std::string>>& merges, const std::string& what);
  // The vocabulary and merges as tokenizer.json's "model" object.
  nlohmann::json model_json() const;
  // The same tokens with the same merges in the same order.
  bool operator==(const Bpe& o) const;

  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t merges() const { return static_cast<int32_t>(pair_rank_.size()); }
  // The id of <|endoftext|>, -1 when the vocabulary has none.
  int32_t end_of_text() const { return end_of_text_; }

  // Special tokens are plain text here ("<|endoftext|>" is 7 ordinary tokens).
  std::vector<int32_t> encode_ordinary(std::string_view text) const;
  // "<|endoftext|>" in the text becomes end_of_text(), the rest as above.
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of the tokens, concatenated (not always valid UTF-8 when cut
  // mid-character); ConfigError naming an id out of range.
  std::string decode(const std::vector<int32_t>& ids) const;
  const std::string& token_bytes(int32_t id) const { return token_bytes_.at(static_cast<size_t>(id)); }
  // A token as the files write it, in GPT-2's printable alphabet.
  std::string token_text(int32_t id) const;
  // The merged pairs (left id, right id), by rank.
  std::vector<std::pair<int32_t, int32_t>> merge_list() const;

 private:
  struct Merge {
    int32_t rank, id;
  };
  struct Scratch {
    std::vector<int32_t> sym, next;
    std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;  // piece -> its ids' [start, +n) in out
  };
  void encode_piece(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out, Scratch& s) const;

  std::vector<std::string> token_bytes_;           // id -> raw bytes
  std::array<int32_t, 256> byte_id_{};             // byte -> its single-byte token
  std::unordered_map<uint64_t, Merge> pair_rank_;  // (left << 32 | right) -> rank, merged id
  int32_t end_of_text_ = -1;
};

}  // namespace parallm::data
