// tiktoken's encodings: a rank file (one "<base64 of the token's bytes>
// <rank>" a line, as cl100k_base.tiktoken), the encoding's pattern and its
// special tokens, tokenized as tiktoken does.
//
// Design: a rank file is read into a data::Bpe whose ids are the ranks and
// whose merges are every way of cutting a token in two tokens, each at the
// rank of the token they make: tiktoken merges the adjacent pair whose joined
// bytes have the lowest rank (leftmost first), which is Bpe's merge with
// these ranks; a piece that is a token is that token (ignore_merges), as
// tiktoken looks a piece up whole first. The special tokens are added tokens
// (matched in encode(), plain text in encode_ordinary()). The known
// encodings' patterns and special tokens are tiktoken's (the rank files are
// data, given by the user); meta.json keeps the ranks, pattern and specials.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/bpe.h"

namespace parallm::data {

struct TiktokenEncoding {
  std::string name;  // "" for a pattern the user gave
  std::string pattern;
  std::vector<std::pair<std::string, int32_t>> special;  // token text, id
};

// gpt2 (= r50k_base), p50k_base, cl100k_base, o200k_base; ConfigError listing them for another name.
TiktokenEncoding tiktoken_encoding(const std::string& name);
std::vector<std::string> tiktoken_encoding_names();

// The rank file at `path` with `enc`'s pattern and special tokens. IoError naming the file and line of a
// malformed line, a rank given twice or a file without all 256 single bytes; ConfigError for a bad pattern.
Bpe load_tiktoken(const std::string& path, const TiktokenEncoding& enc);
// The same from the file's text; `what` names it in errors.
Bpe tiktoken_from_text(const std::string& ranks, const TiktokenEncoding& enc, const std::string& what);

// meta.json's form: {"type": "tiktoken", "encoding", "pattern", "special_tokens" ([token, id]...), "ranks" (the
// rank file's text)}.
nlohmann::json tiktoken_definition(const Bpe& bpe);
Bpe tiktoken_from_definition(const nlohmann::json& j, const std::string& what);

// Standard base64 (with padding), as rank files write tokens; exposed for tests.
std::string base64_encode(std::string_view bytes);
// false when `text` is not base64.
bool base64_decode(std::string_view text, std::string& out);

}  // namespace parallm::data
