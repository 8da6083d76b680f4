#include "data/bpe.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fileio.h"
#include "data/prepare.h"

namespace parallm::data {

namespace {

namespace fs = std::filesystem;
constexpr const char* kBpeWhere = "data.bpe";
constexpr std::string_view kEndOfText = "<|endoftext|>";

// The classes of GPT-2's pattern: \s (Unicode White_Space), \p{L}, \p{N}, the rest.
enum class Cls : uint8_t { kSpace, kLetter, kNumber, kOther };

Cls class_of(char32_t c) {
  if (c < 0x80) {
    if (c == ' ' || (c >= '\t' && c <= '\r')) return Cls::kSpace;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Cls::kLetter;
    if (c >= '0' && c <= '9') return Cls::kNumber;
    return Cls::kOther;
  }
  const auto cp = static_cast<UChar32>(c);
  if (u_isUWhiteSpace(cp)) return Cls::kSpace;
  const uint32_t mask = U_GET_GC_MASK(cp);
  if (mask & U_GC_L_MASK) return Cls::kLetter;
  if (mask & U_GC_N_MASK) return Cls::kNumber;
  return Cls::kOther;
}

size_t utf8_length(char32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

// The length in code points of the contraction ('s 't 'm 'd 're 've 'll) at i, 0 if none.
size_t contraction_at(const std::vector<char32_t>& c, size_t i) {
  if (c[i] != '\'' || i + 1 >= c.size()) return 0;
  const char32_t a = c[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= c.size()) return 0;
  const char32_t b = c[i + 2];
  return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

// The end of the piece starting at code point i (the first alternative of the pattern that matches).
size_t piece_end(const std::vector<char32_t>& c, const std::vector<Cls>& k, size_t i) {
  const size_t n = c.size();
  if (const size_t len = contraction_at(c, i)) return i + len;
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional space, then a run of one class.
  size_t j = i + (c[i] == ' ' && i + 1 < n && k[i + 1] != Cls::kSpace ? 1 : 0);
  if (k[j] != Cls::kSpace) {
    const Cls run = k[j];
    while (j < n && k[j] == run) ++j;
    return j;
  }
  // "\s+(?!\S)|\s+": a run of white space; before a non-space, all but its last character
  // (which then leads the next piece), or that one character when the run is one long.
  j = i;
  while (j < n && k[j] == Cls::kSpace) ++j;
  if (j == n) return n;
  return j - i >= 2 ? j - 1 : i + 1;
}

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_text_file(path, kBpeWhere);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(kBpeWhere, fmt::format("{} is not valid JSON: {}", path, e.what()));
  }
}

std::vector<std::pair<std::string, int32_t>> vocab_of(const nlohmann::json& j, const std::string& what) {
  PARALLM_CHECK(j.is_object(), IoError, kBpeWhere, "{}: expected an object of token -> id", what);
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    PARALLM_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX, IoError, kBpeWhere,
                  "{}: token \"{}\" has id {}, not an integer in [0, 2^31)", what, token, id.dump());
    out.emplace_back(token, id.get<int32_t>());
  }
  return out;
}

std::pair<std::string, std::string> merge_of(const std::string& line, const std::string& what, size_t number) {
  const size_t space = line.find(' ');
  PARALLM_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                    line.find(' ', space + 1) == std::string::npos,
                IoError, kBpeWhere, "{} line {}: \"{}\" is not two tokens separated by one space", what, number, line);
  return {line.substr(0, space), line.substr(space + 1)};
}

}  // namespace

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 0x100;  // the bytes GPT-2 does not print as themselves, in byte order
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  const std::vector<char32_t> c = decode_utf8(std::string(text), "the text to tokenize");
  std::vector<Cls> k(c.size());
  for (size_t i = 0; i < c.size(); ++i) k[i] = class_of(c[i]);
  std::vector<std::string_view> pieces;
  size_t byte = 0;
  for (size_t i = 0; i < c.size();) {
    const size_t end = piece_end(c, k, i);
    size_t bytes = 0;
    for (size_t m = i; m < end; ++m) bytes += utf8_length(c[m]);
    pieces.push_back(text.substr(byte, bytes));
    byte += bytes;
    i = end;
  }
  return pieces;
}

Bpe Bpe::from_lists(const std::vector<std::pair<std::string, int32_t>>& vocab,
                    const std::vector<std::pair<std::string, std::string>>& merges, const std::string& what) {
  std::map<char32_t, char> to_byte;
  for (int b = 0; b < 256; ++b) to_byte[byte_to_unicode()[static_cast<size_t>(b)]] = static_cast<char>(b);
  Bpe t;
  t.token_bytes_.resize(vocab.size());
  std::vector<bool> seen(vocab.size());
  std::unordered_map<std::string, int32_t> id_of;
  for (const auto& [token, id] : vocab) {
    PARALLM_CHECK(static_cast<size_t>(id) < vocab.size(), IoError, kBpeWhere,
                  "{}: token \"{}\" has id {}, but the {} tokens should have ids 0..{}", what, token, id, vocab.size(),
                  vocab.size() - 1);
    PARALLM_CHECK(!seen[static_cast<size_t>(id)], IoError, kBpeWhere,
                  "{}: id {} is given to two tokens (one is \"{}\")", what, id, token);
    seen[static_cast<size_t>(id)] = true;
    std::string bytes;
    for (char32_t cp : decode_utf8(token, what)) {
      const auto it = to_byte.find(cp);
      PARALLM_CHECK(it != to_byte.end(), IoError, kBpeWhere,
                    "{}: token \"{}\" (id {}) has U+{:04X}, which is not in GPT-2's byte alphabet", what, token, id,
                    static_cast<uint32_t>(cp));
      bytes += it->second;
    }
    t.token_bytes_[static_cast<size_t>(id)] = bytes;
    id_of.emplace(token, id);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(encode_utf8(byte_to_unicode()[static_cast<size_t>(b)]));
    PARALLM_CHECK(it != id_of.end(), IoError, kBpeWhere, "{}: no token for the single byte 0x{:02X}", what, b);
    t.byte_id_[static_cast<size_t>(b)] = it->second;
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    PARALLM_CHECK(ia != id_of.end() && ib != id_of.end() && iab != id_of.end(), IoError, kBpeWhere,
                  "{}: merge {} (\"{} {}\") names a token that is not in the vocabulary (\"{}\")", what, r + 1, a, b,
                  ia == id_of.end()   ? a
                  : ib == id_of.end() ? b
                                      : a + b);
    const uint64_t key = static_cast<uint64_t>(ia->second) << 32 | static_cast<uint32_t>(ib->second);
    t.pair_rank_.emplace(key, Merge{static_cast<int32_t>(r), iab->second});  // the first rank of a pair counts
  }
  if (const auto it = id_of.find(std::string(kEndOfText)); it != id_of.end()) t.end_of_text_ = it->second;
  return t;
}

Bpe Bpe::load_files(const std::string& vocab_json, const std::string& merges_txt) {
  const auto vocab = vocab_of(read_json(vocab_json), vocab_json);
  const std::string text = read_text_file(merges_txt, kBpeWhere);
  std::vector<std::pair<std::string, std::string>> merges;
  size_t start = 0, number = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++number;
    start = end + 1;
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(merge_of(line, merges_txt, number));
  }
  return from_lists(vocab, merges, vocab_json + " + " + merges_txt);
}

namespace {

// tokenizer.json's "model" object: its vocab, with `added` (added_tokens) where the vocab lacks them, and merges.
Bpe model_of(const nlohmann::json& model, const nlohmann::json* added, const std::string& what) {
  PARALLM_CHECK(model.is_object() && model.value("type", "") == "BPE", IoError, kBpeWhere,
                "{}: expected a model {{\"type\": \"BPE\", ...}}", what);
  PARALLM_CHECK(model.contains("vocab") && model.contains("merges") && model["merges"].is_array(), IoError, kBpeWhere,
                "{}: the model has no vocab object or merges list", what);
  auto vocab = vocab_of(model["vocab"], what + " model.vocab");
  if (added && added->is_array()) {
    for (const auto& a : *added) {
      const std::string content = a.value("content", "");
      const bool known = std::any_of(vocab.begin(), vocab.end(), [&](const auto& v) { return v.first == content; });
      if (!known && a.contains("id") && a["id"].is_number_integer())
        vocab.emplace_back(content, a["id"].get<int32_t>());
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  size_t number = 0;
  for (const auto& m : model["merges"]) {  // "a b" (all versions) or ["a", "b"] (tokenizers >= 0.20)
    ++number;
    if (m.is_string()) {
      merges.push_back(merge_of(m.get<std::string>(), what + " model.merges", number));
    } else {
      PARALLM_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), IoError, kBpeWhere,
                    "{}: model.merges entry {} is {}, neither \"a b\" nor [\"a\", \"b\"]", what, number, m.dump());
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  return Bpe::from_lists(vocab, merges, what);
}

}  // namespace

Bpe Bpe::load_tokenizer_json(const std::string& path) {
  const nlohmann::json j = read_json(path);
  PARALLM_CHECK(j.contains("model"), IoError, kBpeWhere, "{}: expected \"model\": {{\"type\": \"BPE\", ...}}", path);
  return model_of(j["model"], j.contains("added_tokens") ? &j["added_tokens"] : nullptr, path);
}

Bpe Bpe::from_model_json(const nlohmann::json& model, const std::string& what) {
  return model_of(model, nullptr, what);
}

std::string gpt2_printable(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes) s += encode_utf8(byte_to_unicode()[b]);
  return s;
}

std::string Bpe::token_text(int32_t id) const {
  return gpt2_printable(token_bytes(id));
}

std::vector<std::pair<int32_t, int32_t>> Bpe::merge_list() const {
  std::vector<std::pair<int32_t, std::pair<int32_t, int32_t>>> ranked;
  ranked.reserve(pair_rank_.size());
  for (const auto& [key, m] : pair_rank_)
    ranked.push_back({m.rank, {static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xffffffffu)}});
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::pair<int32_t, int32_t>> out;
  out.reserve(ranked.size());
  for (const auto& r : ranked) out.push_back(r.second);
  return out;
}

nlohmann::json Bpe::model_json() const {
  nlohmann::json vocab = nlohmann::json::object();
  for (int32_t id = 0; id < vocab_size(); ++id) vocab[token_text(id)] = id;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : merge_list()) merges.push_back(token_text(a) + " " + token_text(b));
  return {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
}

bool Bpe::operator==(const Bpe& o) const {
  return token_bytes_ == o.token_bytes_ && merge_list() == o.merge_list();
}

bool Bpe::dir_has_tokenizer(const std::string& dir) {
  std::error_code ec;
  const auto has = [&](const char* name) { return fs::exists(fs::path(dir) / name, ec); };
  return has("tokenizer.json") || (has("vocab.json") && has("merges.txt")) || (has("encoder.json") && has("vocab.bpe"));
}

Bpe Bpe::load_dir(const std::string& dir) {
  const auto has = [&](const char* name) { return fs::exists(fs::path(dir) / name); };
  const auto at = [&](const char* name) { return (fs::path(dir) / name).string(); };
  if (has("tokenizer.json")) return load_tokenizer_json(at("tokenizer.json"));
  if (has("vocab.json") && has("merges.txt")) return load_files(at("vocab.json"), at("merges.txt"));
  if (has("encoder.json") && has("vocab.bpe")) return load_files(at("encoder.json"), at("vocab.bpe"));
  throw IoError(kBpeWhere, fmt::format("{} holds no GPT-2 tokenizer: expected tokenizer.json, vocab.json + merges.txt, "
                                       "or encoder.json + vocab.bpe",
                                       dir));
}

void Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const {
  std::vector<int32_t>& sym = s.sym;
  std::vector<int32_t>& next = s.next;
  sym.resize(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  while (sym.size() > 1) {
    const Merge* best = nullptr;
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const uint64_t key = static_cast<uint64_t>(sym[i]) << 32 | static_cast<uint32_t>(sym[i + 1]);
      const auto it = pair_rank_.find(key);
      if (it != pair_rank_.end() && (!best || it->second.rank < best->rank)) {
        best = &it->second;
        best_key = key;
      }
    }
    if (!best) break;
    // Every occurrence of the pair, left to right, without overlap.
    next.clear();
    for (size_t i = 0; i < sym.size(); ++i) {
      const bool pair =
          i + 1 < sym.size() && (static_cast<uint64_t>(sym[i]) << 32 | static_cast<uint32_t>(sym[i + 1])) == best_key;
      next.push_back(pair ? best->id : sym[i]);
      if (pair) ++i;
    }
    sym.swap(next);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

// A piece seen before in the same text is copied from where its ids were
// written (text is mostly repeated words); the rest are merged.
void Bpe::encode_text(std::string_view text, std::vector<int32_t>& out, Scratch& s) const {
  for (std::string_view piece : gpt2_pretokenize(text)) {
    if (piece.size() == 1) {
      out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    const auto [it, fresh] = s.seen.try_emplace(piece, out.size(), 0);
    if (!fresh) {
      const auto [from, n] = it->second;
      for (size_t i = from; i < from + n; ++i) {
        const int32_t id = out[i];
        out.push_back(id);
      }
      continue;
    }
    encode_piece(piece, out, s);
    it->second.second = out.size() - it->second.first;
  }
}

std::vector<int32_t> Bpe::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  Scratch s;
  encode_text(text, out, s);
  return out;
}

std::vector<int32_t> Bpe::encode(std::string_view text) const {
  if (end_of_text_ < 0) return encode_ordinary(text);
  std::vector<int32_t> out;
  Scratch s;
  size_t start = 0;
  for (size_t at = text.find(kEndOfText); at != std::string_view::npos; at = text.find(kEndOfText, start)) {
    encode_text(text.substr(start, at - start), out, s);
    out.push_back(end_of_text_);
    start = at + kEndOfText.size();
  }
  encode_text(text.substr(start), out, s);
  return out;
}

std::string Bpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    PARALLM_CHECK(id >= 0 && id < vocab_size(), ConfigError, kBpeWhere, "token id {} is outside the vocabulary (0..{})",
                  id, vocab_size() - 1);
    out += token_bytes_[static_cast<size_t>(id)];
  }
  return out;
}

}  // namespace parallm::data
