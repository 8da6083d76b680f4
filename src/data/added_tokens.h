// Added tokens (Hugging Face's added_tokens, tiktoken's special tokens):
// strings matched in the text before anything else and given their id whole,
// the text around them tokenized as usual.
//
// Design: Hugging Face's AddedVocabulary, for its ids. The text is scanned
// for the leftmost place where a token starts, and there the longest token
// (Aho-Corasick's leftmost-longest); the scan goes on after it, as
// Aho-Corasick's non-overlapping search does, even when the flags then drop
// the match. single_word keeps a match only between non-alphanumeric code
// points; lstrip and rstrip take the white space before and after into the
// token. Tokens with normalized = false are matched on the raw text first,
// those with normalized = true on what remains after normalization (their
// content normalized too). Candidates are found through a table of the
// tokens' first bytes, so a text without any costs one pass.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace parallm::data {

struct AddedToken {
  std::string content;  // the text matched (UTF-8), which is also what the token decodes to
  int32_t id = -1;
  bool special = true;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false;
  bool operator==(const AddedToken&) const = default;
};

// A run of text to tokenize (id -1) or a matched added token.
struct TextPart {
  std::string_view text;
  int32_t id = -1;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  // `nfc`: the tokenizer normalizes to NFC (the content of normalized tokens is matched in NFC).
  AddedTokens(std::vector<AddedToken> tokens, bool nfc);
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }
  // Whether any token is matched on normalized text (the second pass).
  bool has_normalized() const { return has_[1]; }
  // Appends the segments of `text` to out: the tokens with this `normalized` flag found, the text between.
  void split(std::string_view text, bool normalized, std::vector<TextPart>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::string> match_;                   // what each token matches (normalized content when normalized)
  std::array<std::vector<uint32_t>, 256> first_[2];  // per pass, per first byte: tokens, the longest first
  bool has_[2] = {false, false};
};

}  // namespace parallm::data
