// Byte-level BPE tokenizers (issues 35, 46): GPT-2's, Hugging Face's
// tokenizer.json (Llama 3, Qwen2, a trained one) and tiktoken's rank files
// (cl100k_base, ...), with ids exactly as OpenAI's encoder.py, Hugging Face's
// tokenizers and tiktoken give them.
//
// Design: encoding is four steps. Added tokens (special or not) are found
// first and kept whole (data/added_tokens.h); the rest is normalized (NFC,
// where the tokenizer asks) and cut into pieces by the pre-tokenizer
// (data/pretokenize.h: GPT-2's matcher, or PCRE2 patterns); each piece is a
// token when the tokenizer says so (ignore_merges, tiktoken) and it is one,
// else its bytes start as one symbol each and the adjacent pair with the
// lowest rank (leftmost first) is merged, one merge at a time, as Hugging
// Face's BPE and tiktoken do (for GPT-2's merges this equals encoder.py's
// merge-everywhere). A merge's rank is its line in the merges list, or for
// tiktoken the rank of the merged token. Short pieces keep their pairs' ranks
// in an array; long ones (a CJK sentence is one piece) use a heap, so a piece
// costs n log n. Within one call a piece seen before is copied from where its
// ids were written (text is mostly repeated words). The tables hold raw
// bytes; tokenizer files write tokens in GPT-2's printable alphabet (each byte
// one code point, byte_to_unicode()). Decoding concatenates the tokens' bytes.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/added_tokens.h"
#include "data/pretokenize.h"

namespace parallm::data {

// GPT-2's printable code point of each byte (byte 0x20 -> U+0120 "Ġ", ...).
const std::array<char32_t, 256>& byte_to_unicode();
// Raw bytes in that alphabet, as the tokenizer files write tokens.
std::string gpt2_printable(std::string_view bytes);

// What a tokenizer does around its vocabulary and merges.
struct BpeSpec {
  Pretokenizer pre;                     // default: no cut (a loader sets GPT-2's or patterns)
  bool nfc = false;                     // Unicode NFC before pre-tokenizing (Qwen2)
  bool add_prefix_space = false;        // ByteLevel's: a space before each text that does not start with one
  bool ignore_merges = false;           // a piece that is a token is that token (Llama 3's tokenizer.json, tiktoken)
  std::vector<AddedToken> added;        // matched in encode(), plain text in encode_ordinary()
  std::vector<int32_t> prefix, suffix;  // the post-processor's template around one text (Llama 3: the BOS)
  // "bpe" (GPT-2's kind: model_json() is all of it), "tokenizer.json" or "tiktoken" (meta.json's "tokenizer")
  std::string kind = "bpe";
  std::string encoding;  // tiktoken: the encoding's name, or "" for a pattern given
  // tokenizer.json's normalizer, pre_tokenizer, post_processor and decoder, written back as read.
  nlohmann::json normalizer, pre_tokenizer, post_processor, decoder;
};

class Bpe {
 public:
  // A pair of tokens and the token it merges into, at `rank` (lower first).
  struct MergeRule {
    int32_t left, right, rank, id;
  };

  Bpe();
  // The tokenizer in `dir`: tokenizer.json, or vocab.json + merges.txt, or
  // encoder.json + vocab.bpe (the first found). IoError naming the file and
  // entry when one is malformed or inconsistent; ConfigError naming the field
  // a tokenizer.json uses that parallm does not do.
  static Bpe load_dir(const std::string& dir);
  // A tokenizer.json file, or a directory as load_dir.
  static Bpe load(const std::string& path);
  // Whether `dir` holds tokenizer files load_dir() reads (a character model's
  // Hugging Face export has none).
  static bool dir_has_tokenizer(const std::string& dir);
  // A token -> id table (vocab.json / encoder.json) and the merges file.
  static Bpe load_files(const std::string& vocab_json, const std::string& merges_txt);
  static Bpe load_tokenizer_json(const std::string& path);
  // A parsed tokenizer.json (data/tokenizer_json.cpp); `what` names it in errors.
  static Bpe from_tokenizer_json(const nlohmann::json& j, const std::string& what);
  // tokenizer.json's "model" object ({"type": "BPE", "vocab": {...}, "merges": [...]}),
  // as model_json() writes it; `what` names it in errors.
  static Bpe from_model_json(const nlohmann::json& model, const std::string& what);
  // From the (token text, id) pairs and the merges (token texts) in rank order.
  static Bpe from_lists(const std::vector<std::pair<std::string, int32_t>>& vocab,
                        const std::vector<std::pair<std::string, std::string>>& merges, const std::string& what);
  // The tables and the spec: `tokens` id -> raw bytes ("" for an id no token has), `model` whether a token
  // is the model's (not only an added token); IoError naming `what` when they do not fit together.
  static Bpe assemble(std::vector<std::string> tokens, std::vector<bool> model, const std::vector<MergeRule>& merges,
                      BpeSpec spec, const std::string& what);
  // What meta.json keeps to make this tokenizer again (definition()), and back.
  nlohmann::json definition() const;
  static Bpe from_definition(const nlohmann::json& j, const std::string& what);

  // The vocabulary and merges as tokenizer.json's "model" object.
  nlohmann::json model_json() const;
  // The whole tokenizer as Hugging Face's tokenizer.json (which Hugging Face's
  // tokenizers load and load_tokenizer_json reads back equal).
  nlohmann::json tokenizer_json() const;
  // The same tokens, merges and spec.
  bool operator==(const Bpe& o) const;

  // One more than the largest id.
  int32_t vocab_size() const;
  int32_t merges() const;
  // The id of <|endoftext|> (or Llama 3's <|end_of_text|>), -1 when the vocabulary has none.
  int32_t end_of_text() const;
  const BpeSpec& spec() const { return *spec_; }
  const std::string& kind() const { return spec_->kind; }
  // Whether prepare_bpe may cut a text into chunks at its safe places (data/prepare_bpe.h).
  bool chunks_at_safe_cuts() const;
  // The template's ids before and after one text (Llama 3's: <|begin_of_text|> before).
  const std::vector<int32_t>& template_prefix() const { return spec_->prefix; }
  const std::vector<int32_t>& template_suffix() const { return spec_->suffix; }

  // Added tokens are plain text here ("<|endoftext|>" is 7 ordinary tokens), as tiktoken's encode_ordinary.
  std::vector<int32_t> encode_ordinary(std::string_view text) const;
  // Added tokens in the text are their ids (tiktoken's encode(allowed_special="all")).
  std::vector<int32_t> encode(std::string_view text) const;
  // encode() inside the post-processor's template: Hugging Face's encode(text, add_special_tokens=True).
  std::vector<int32_t> encode_with_template(std::string_view text) const;
  // The bytes of the tokens, concatenated (not always valid UTF-8 when cut
  // mid-character); ConfigError naming an id out of range or that no token has.
  std::string decode(const std::vector<int32_t>& ids) const;
  const std::string& token_bytes(int32_t id) const;
  // Whether `id` is a token of the model's vocabulary (not an added token outside it, nor a hole).
  bool is_model_token(int32_t id) const;
  // A token as the files write it, in GPT-2's printable alphabet.
  std::string token_text(int32_t id) const;
  // The merged pairs (left id, right id), by rank.
  std::vector<std::pair<int32_t, int32_t>> merge_list() const;

 private:
  struct Tables;
  struct Scratch;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const;
  void encode_long_piece(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out, Scratch& s) const;
  void encode_all(std::string_view text, bool match_added, std::vector<int32_t>& out) const;

  // Immutable once made, shared by copies (the tables of Llama 3 are some 30 MB).
  std::shared_ptr<const Tables> t_;
  std::shared_ptr<const BpeSpec> spec_;
  std::shared_ptr<const AddedTokens> added_;
};

}  // namespace parallm::data
