// Pre-tokenizers of byte-level BPE: the text cut into pieces that BPE merges
// within, never across, and the text steps around them (UTF-8 checking, NFC).
//
// Design: a pre-tokenizer is a list of levels, each cutting every piece of
// the level before (Hugging Face's Sequence of Split; Split's behavior
// "Isolated": each match is a piece and so is each gap between matches).
// GPT-2's pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+) is a matcher written out over code points
// with ICU's classes (gpt2_pretokenize); every other pattern (Llama 3's and
// cl100k's, Qwen2's, o200k's, a user's) is compiled by PCRE2 with UTF, UCP
// and its JIT, after \s and \S are rewritten as Unicode's White_Space, the
// class Oniguruma (Hugging Face), Rust's regex (tiktoken) and ICU use: PCRE2's
// own \s adds U+180E. Compiled patterns are shared (immutable); each thread
// matches with its own match data.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace parallm::data {

// The pieces of `text` (valid UTF-8, else ConfigError) by GPT-2's pattern;
// they tile the text in order.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

// ConfigError naming `what` and the byte offset where `text` is not UTF-8.
void check_utf8(std::string_view text, const std::string& what);

// Unicode NFC of `text` (valid UTF-8) into `out`; false (out untouched) when
// `text` is already NFC, which is the common case and costs one scan.
bool nfc_if_needed(std::string_view text, std::string& out);

// \s and \S of a regular expression as Unicode's White_Space (in and out of
// character classes); exposed for tests.
std::string white_space_as_unicode(const std::string& pattern);

class Pretokenizer {
 public:
  struct Level;
  // The whole text one piece.
  Pretokenizer() = default;
  // A level by GPT-2's pattern (the hand-written matcher).
  void add_gpt2();
  // A level by a PCRE2 pattern; ConfigError naming `what` and the position
  // when PCRE2 refuses it.
  void add_regex(const std::string& pattern, const std::string& what);

  // The pieces of `text` (valid UTF-8: the caller checked) appended to `out`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  // GPT-2's pattern, or a regex's source, for each level.
  std::vector<std::string> patterns() const;
  bool empty() const { return levels_.empty(); }
  // Whether each level is one of the patterns whose pieces never cross, nor
  // look past, a "\n" between printable ASCII or a space between ASCII
  // letters (prepare_bpe's chunk cuts): GPT-2's, cl100k's / Llama 3's, Qwen2's.
  bool cuts_like_gpt2() const;

 private:
  void split_level(size_t level, std::string_view text, std::vector<std::string_view>& out) const;
  std::vector<std::shared_ptr<const Level>> levels_;
};

// GPT-2's pattern as Hugging Face's ByteLevel pre-tokenizer and tiktoken's
// "gpt2" encoding write it.
extern const char* const kGpt2Pattern;

}  // namespace parallm::data
