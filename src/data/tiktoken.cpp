#include "data/tiktoken.h"

#include <charconv>
#include <unordered_map>

#include "core/error.h"
#include "core/fileio.h"

namespace parallm::data {

namespace {

constexpr const char* kTiktokenWhere = "data.tiktoken";

// tiktoken's patterns (tiktoken_ext/openai_public.py; cl100k's in the form before its possessive rewrite, which
// gives the same pieces and which Llama 3's tokenizer.json also writes).
constexpr const char* kCl100k =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::vector<TiktokenEncoding>& known() {
  static const std::vector<TiktokenEncoding> k = {
      {"gpt2", kGpt2Pattern, {{"<|endoftext|>", 50256}}},
      {"r50k_base", kGpt2Pattern, {{"<|endoftext|>", 50256}}},
      {"p50k_base", kGpt2Pattern, {{"<|endoftext|>", 50256}}},
      {"cl100k_base",
       kCl100k,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}}},
      {"o200k_base", kO200k, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
  };
  return k;
}

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string& out) {
  static const std::array<int8_t, 256> value = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    for (int i = 0; i < 64; ++i) v[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
    return v;
  }();
  out.clear();
  if (text.size() % 4 != 0) return false;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int8_t d = k >= 4 - pad ? 0 : value[static_cast<unsigned char>(text[i + static_cast<size_t>(k)])];
      if (d < 0) return false;
      v = v << 6 | static_cast<uint32_t>(d);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>(v >> 8 & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return true;
}

std::vector<std::string> tiktoken_encoding_names() {
  std::vector<std::string> out;
  for (const auto& e : known()) out.push_back(e.name);
  return out;
}

TiktokenEncoding tiktoken_encoding(const std::string& name) {
  for (const auto& e : known())
    if (e.name == name) return e;
  throw ConfigError(kTiktokenWhere, fmt::format("unknown tiktoken encoding \"{}\" (known: {}; or give the pattern)",
                                                name, fmt::join(tiktoken_encoding_names(), ", ")));
}

Bpe tiktoken_from_text(const std::string& text, const TiktokenEncoding& enc, const std::string& what) {
  std::vector<std::pair<std::string, int32_t>> ranks;
  std::string bytes;
  size_t number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    int64_t rank = -1;
    const std::string_view r = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    const auto [p, ec] = std::from_chars(r.data(), r.data() + r.size(), rank);
    PARALLM_CHECK(space != std::string_view::npos && base64_decode(line.substr(0, space), bytes) && ec == std::errc() &&
                      p == r.data() + r.size() && rank >= 0 && rank < INT32_MAX,
                  IoError, kTiktokenWhere, "{} line {}: \"{}\" is not \"<base64 token> <rank>\"", what, number,
                  std::string(line.substr(0, 80)));
    ranks.emplace_back(bytes, static_cast<int32_t>(rank));
  }
  int64_t size = 0;
  for (const auto& r : ranks) size = std::max<int64_t>(size, r.second + 1);
  for (const auto& s : enc.special) size = std::max<int64_t>(size, s.second + 1);
  std::vector<std::string> tokens(static_cast<size_t>(size));
  std::vector<bool> model(static_cast<size_t>(size));
  for (const auto& [b, rank] : ranks) {
    PARALLM_CHECK(!model[static_cast<size_t>(rank)], IoError, kTiktokenWhere, "{}: rank {} is given to two tokens",
                  what, rank);
    PARALLM_CHECK(!b.empty(), IoError, kTiktokenWhere, "{}: rank {} is an empty token", what, rank);
    tokens[static_cast<size_t>(rank)] = b;
    model[static_cast<size_t>(rank)] = true;
  }
  BpeSpec spec;
  for (const auto& [content, id] : enc.special) {
    PARALLM_CHECK(id >= 0 && !model[static_cast<size_t>(id)], ConfigError, kTiktokenWhere,
                  "{}: special token {} has id {}, which a token of the rank file has", what, content, id);
    tokens[static_cast<size_t>(id)] = content;
    spec.added.push_back({content, id});
  }
  std::unordered_map<std::string_view, int32_t> id_of;
  for (size_t id = 0; id < tokens.size(); ++id)
    if (model[id])
      PARALLM_CHECK(id_of.emplace(tokens[id], static_cast<int32_t>(id)).second, IoError, kTiktokenWhere,
                    "{}: the token of rank {} is also that of rank {}", what, id, id_of[tokens[id]]);
  // Every cut of a token into two tokens merges into it at its rank.
  std::vector<Bpe::MergeRule> rules;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string_view t = tokens[id];
    if (!model[id] || t.size() < 2) continue;
    for (size_t k = 1; k < t.size(); ++k) {
      const auto a = id_of.find(t.substr(0, k)), b = id_of.find(t.substr(k));
      if (a != id_of.end() && b != id_of.end())
        rules.push_back({a->second, b->second, static_cast<int32_t>(id), static_cast<int32_t>(id)});
    }
  }
  spec.pre.add_regex(enc.pattern, what + " pattern");
  spec.ignore_merges = true;
  spec.kind = "tiktoken";
  spec.encoding = enc.name;
  spec.pre_tokenizer = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", enc.pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  return Bpe::assemble(std::move(tokens), std::move(model), rules, std::move(spec), what);
}

Bpe load_tiktoken(const std::string& path, const TiktokenEncoding& enc) {
  return tiktoken_from_text(read_text_file(path, kTiktokenWhere), enc, path);
}

nlohmann::json tiktoken_definition(const Bpe& bpe) {
  std::string ranks;
  for (int32_t id = 0; id < bpe.vocab_size(); ++id)
    if (bpe.is_model_token(id)) ranks += base64_encode(bpe.token_bytes(id)) + " " + std::to_string(id) + "\n";
  nlohmann::json special = nlohmann::json::array();  // [token, id] in the order given (an object would sort them)
  for (const auto& a : bpe.spec().added) special.push_back({a.content, a.id});
  const auto patterns = bpe.spec().pre.patterns();
  return {{"type", "tiktoken"},
          {"encoding", bpe.spec().encoding},
          {"pattern", patterns.empty() ? "" : patterns.front()},
          {"special_tokens", std::move(special)},
          {"ranks", std::move(ranks)}};
}

Bpe tiktoken_from_definition(const nlohmann::json& j, const std::string& what) {
  PARALLM_CHECK(j.contains("pattern") && j["pattern"].is_string() && j.contains("ranks") && j["ranks"].is_string() &&
                    j.contains("special_tokens") && j["special_tokens"].is_array(),
                IoError, kTiktokenWhere, "{}: a tiktoken definition needs pattern, ranks and special_tokens", what);
  TiktokenEncoding enc{j.value("encoding", ""), j["pattern"].get<std::string>(), {}};
  for (const auto& s : j["special_tokens"]) {
    PARALLM_CHECK(s.is_array() && s.size() == 2 && s[0].is_string() && s[1].is_number_integer(), IoError,
                  kTiktokenWhere, "{}: special token {} is not [token, id]", what, s.dump());
    enc.special.emplace_back(s[0].get<std::string>(), s[1].get<int32_t>());
  }
  return tiktoken_from_text(j["ranks"].get<std::string>(), enc, what);
}

}  // namespace parallm::data
