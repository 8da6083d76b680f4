#include "data/bpe.h"

#include <algorithm>
#include <climits>
#include <deque>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/fileio.h"
#include "data/prepare.h"

namespace parallm::data {

namespace {

namespace fs = std::filesystem;
constexpr const char* kBpeWhere = "data.bpe";
constexpr size_t kShortPiece = 128;  // longer pieces merge through a heap
constexpr int32_t kNoRank = INT32_MAX;

}  // namespace

// Pieces seen in one call: open addressing from the piece's bytes to where its ids were written.
class PieceCache {
 public:
  struct Entry {
    const char* p = nullptr;
    uint32_t len = 0, n = 0;
    size_t from = 0;
  };
  // The entry of `piece`; `fresh` when it was not there (then filled by the caller).
  Entry* find_or_insert(std::string_view piece, bool& fresh) {
    if (2 * (used_ + 1) > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = std::hash<std::string_view>()(piece) & mask;; i = (i + 1) & mask) {
      Entry& e = slots_[i];
      if (!e.p) {
        e.p = piece.data(), e.len = static_cast<uint32_t>(piece.size());
        ++used_;
        fresh = true;
        return &e;
      }
      if (std::string_view(e.p, e.len) == piece) {
        fresh = false;
        return &e;
      }
    }
  }

 private:
  void grow() {
    std::vector<Entry> old(std::max<size_t>(1024, 2 * slots_.size()));
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Entry& e : old) {
      if (!e.p) continue;
      size_t i = std::hash<std::string_view>()(std::string_view(e.p, e.len)) & mask;
      while (slots_[i].p) i = (i + 1) & mask;
      slots_[i] = e;
    }
  }
  std::vector<Entry> slots_;
  size_t used_ = 0;
};

// The merge table: open addressing, 8 bytes a slot (left id, 20 bits; right id, 20 bits; rank, 24 bits), so that
// Llama 3's 280,147 merges take 4 MB; the merged id of a rank in an array beside (read once per merge made).
class PairTable {
 public:
  static constexpr int kIdBits = 20, kRankBits = 24;
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) { return static_cast<uint64_t>(a) << kIdBits | static_cast<uint32_t>(b); }
  void build(const std::vector<Bpe::MergeRule>& merges) {
    size_t cap = 16;
    while (cap < merges.size() + merges.size() / 2) cap *= 2;  // at most 2/3 full
    slots_.assign(cap, kEmpty);
    mask_ = cap - 1;
    shift_ = 64 - std::countr_zero(cap);
    for (const auto& m : merges) {
      const uint64_t k = key(m.left, m.right);
      size_t i = hash(k);
      while (slots_[i] != kEmpty && slots_[i] >> kRankBits != k) i = (i + 1) & mask_;
      if (slots_[i] != kEmpty) continue;  // the first rank of a pair counts
      slots_[i] = k << kRankBits | static_cast<uint32_t>(m.rank);
      if (static_cast<size_t>(m.rank) >= id_of_rank_.size()) id_of_rank_.resize(static_cast<size_t>(m.rank) + 1, -1);
      if (id_of_rank_[static_cast<size_t>(m.rank)] < 0) id_of_rank_[static_cast<size_t>(m.rank)] = m.id;
    }
  }
  // The rank of merging a and b, kNoRank when they do not merge.
  int32_t rank(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (size_t i = hash(k);; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if (s == kEmpty) return kNoRank;
      if (s >> kRankBits == k) return static_cast<int32_t>(s & ((uint64_t{1} << kRankBits) - 1));
    }
  }
  // The token a merge of this rank makes (tiktoken: every pair of one rank makes the same token).
  int32_t id_of(int32_t rank) const { return id_of_rank_[static_cast<size_t>(rank)]; }

 private:
  size_t hash(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<uint64_t> slots_ = std::vector<uint64_t>(1, kEmpty);
  std::vector<int32_t> id_of_rank_;
  size_t mask_ = 0;
  int shift_ = 63;
};

// The model's tokens by their bytes (ignore_merges: a piece that is a token): open addressing, each slot the
// bytes' hash and the id, so that a lookup costs about one cache miss.
class TokenTable {
 public:
  static uint64_t hash(std::string_view s) {  // FNV-1a, then mixed
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h ^ (h >> 29);
  }
  void build(const std::vector<std::string>& tokens, const std::vector<bool>& model) {
    size_t n = 0, cap = 16;
    for (size_t id = 0; id < tokens.size(); ++id) n += model[id] && !tokens[id].empty();
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    for (size_t id = 0; id < tokens.size(); ++id) {
      if (!model[id] || tokens[id].empty()) continue;
      const uint64_t h = hash(tokens[id]);
      size_t i = h & mask_;
      while (slots_[i].id >= 0) i = (i + 1) & mask_;
      slots_[i] = {h, static_cast<int32_t>(id)};
    }
  }
  // The id of the token whose bytes are `piece`, -1 if none.
  int32_t find(std::string_view piece, const std::vector<std::string>& tokens) const {
    const uint64_t h = hash(piece);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && tokens[static_cast<size_t>(s.id)] == piece) return s.id;
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    int32_t id = -1;
  };
  std::vector<Slot> slots_ = std::vector<Slot>(1);
  size_t mask_ = 0;
};

struct Bpe::Tables {
  std::vector<std::string> token_bytes;  // id -> raw bytes ("" where no token has the id)
  std::vector<bool> model;               // id -> a token of the model's vocabulary
  std::array<int32_t, 256> byte_id{};    // byte -> its single-byte token
  PairTable pairs;
  // The merge of each pair of single bytes, dense ((b0 << 8 | b1) -> rank, id; rank kNoRank where none): a
  // piece's first lookups, half of them, without a cache miss into the pair table.
  std::vector<int32_t> byte_pairs;
  std::vector<MergeRule> merges;  // by rank (then as given)
  TokenTable whole;               // bytes -> id of the model's tokens (ignore_merges)
  int32_t end_of_text = -1;
};

struct Bpe::Scratch {
  std::vector<int32_t> sym, rank, prev, next;
  std::vector<uint64_t> heap;
  PieceCache seen;
  std::vector<std::string_view> pieces;
  std::vector<TextPart> segments, normalized_segments;
  std::deque<std::string> owned;  // text made during the call (NFC, a prefix space): the cache points into it
};

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

std::string gpt2_printable(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes) s += encode_utf8(byte_to_unicode()[b]);
  return s;
}

Bpe::Bpe()
    : t_(std::make_shared<Tables>()), spec_(std::make_shared<BpeSpec>()), added_(std::make_shared<AddedTokens>()) {}

int32_t Bpe::vocab_size() const {
  return static_cast<int32_t>(t_->token_bytes.size());
}
int32_t Bpe::merges() const {
  return static_cast<int32_t>(t_->merges.size());
}
int32_t Bpe::end_of_text() const {
  return t_->end_of_text;
}
const std::string& Bpe::token_bytes(int32_t id) const {
  return t_->token_bytes.at(static_cast<size_t>(id));
}
bool Bpe::is_model_token(int32_t id) const {
  return t_->model.at(static_cast<size_t>(id));
}
bool Bpe::chunks_at_safe_cuts() const {
  return spec_->pre.cuts_like_gpt2() && !spec_->add_prefix_space;
}

Bpe Bpe::assemble(std::vector<std::string> tokens, std::vector<bool> model, const std::vector<MergeRule>& merges,
                  BpeSpec spec, const std::string& what) {
  PARALLM_CHECK(tokens.size() == model.size() && tokens.size() < static_cast<size_t>(INT32_MAX), InternalError,
                kBpeWhere, "{}: {} tokens but {} model flags", what, tokens.size(), model.size());
  auto t = std::make_shared<Tables>();
  t->byte_id.fill(-1);
  for (size_t id = 0; id < tokens.size(); ++id)
    if (model[id] && tokens[id].size() == 1) {
      int32_t& b = t->byte_id[static_cast<unsigned char>(tokens[id][0])];
      if (b < 0) b = static_cast<int32_t>(id);
    }
  for (int b = 0; b < 256; ++b)
    PARALLM_CHECK(t->byte_id[static_cast<size_t>(b)] >= 0, IoError, kBpeWhere,
                  "{}: no token for the single byte 0x{:02X}", what, b);
  const auto n = static_cast<int32_t>(tokens.size());
  PARALLM_CHECK(n <= (1 << PairTable::kIdBits), ConfigError, kBpeWhere,
                "{}: {} ids; parallm's tokenizers hold at most 2^20 = 1,048,576", what, n);
  for (const auto& m : merges)
    PARALLM_CHECK(m.rank >= 0 && m.rank < (1 << PairTable::kRankBits) - 1, ConfigError, kBpeWhere,
                  "{}: merge rank {}; parallm's tokenizers hold ranks below 2^24 - 1", what, m.rank);
  for (const auto& m : merges)
    PARALLM_CHECK(m.left >= 0 && m.left < n && m.right >= 0 && m.right < n && m.id >= 0 && m.id < n &&
                      tokens[static_cast<size_t>(m.id)] ==
                          tokens[static_cast<size_t>(m.left)] + tokens[static_cast<size_t>(m.right)],
                  IoError, kBpeWhere, "{}: merge of ids {} and {} into {} does not join their bytes", what, m.left,
                  m.right, m.id);
  t->token_bytes = std::move(tokens);
  t->model = std::move(model);
  t->merges = merges;
  std::stable_sort(t->merges.begin(), t->merges.end(),
                   [](const MergeRule& a, const MergeRule& b) { return a.rank < b.rank; });
  t->pairs.build(t->merges);
  t->byte_pairs.resize(65536);
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b)
      t->byte_pairs[static_cast<size_t>(a << 8 | b)] =
          t->pairs.rank(t->byte_id[static_cast<size_t>(a)], t->byte_id[static_cast<size_t>(b)]);
  if (spec.ignore_merges) t->whole.build(t->token_bytes, t->model);
  for (const char* eot : {"<|endoftext|>", "<|end_of_text|>"}) {
    for (const auto& a : spec.added)
      if (t->end_of_text < 0 && a.content == eot) t->end_of_text = a.id;
    for (size_t id = 0; id < t->token_bytes.size() && t->end_of_text < 0; ++id)
      if (t->token_bytes[id] == eot) t->end_of_text = static_cast<int32_t>(id);
  }
  Bpe b;
  b.added_ = std::make_shared<AddedTokens>(spec.added, spec.nfc);
  b.spec_ = std::make_shared<BpeSpec>(std::move(spec));
  b.t_ = std::move(t);
  return b;
}

Bpe Bpe::from_lists(const std::vector<std::pair<std::string, int32_t>>& vocab,
                    const std::vector<std::pair<std::string, std::string>>& merges, const std::string& what) {
  std::map<char32_t, char> to_byte;
  for (int b = 0; b < 256; ++b) to_byte[byte_to_unicode()[static_cast<size_t>(b)]] = static_cast<char>(b);
  std::vector<std::string> tokens(vocab.size());
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
    tokens[static_cast<size_t>(id)] = bytes;
    id_of.emplace(token, id);
  }
  for (int b = 0; b < 256; ++b)
    PARALLM_CHECK(id_of.count(encode_utf8(byte_to_unicode()[static_cast<size_t>(b)])), IoError, kBpeWhere,
                  "{}: no token for the single byte 0x{:02X}", what, b);
  std::vector<MergeRule> rules;
  rules.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    PARALLM_CHECK(ia != id_of.end() && ib != id_of.end() && iab != id_of.end(), IoError, kBpeWhere,
                  "{}: merge {} (\"{} {}\") names a token that is not in the vocabulary (\"{}\")", what, r + 1, a, b,
                  ia == id_of.end()   ? a
                  : ib == id_of.end() ? b
                                      : a + b);
    rules.push_back({ia->second, ib->second, static_cast<int32_t>(r), iab->second});
  }
  BpeSpec spec;
  spec.pre.add_gpt2();
  if (const auto it = id_of.find("<|endoftext|>"); it != id_of.end())
    spec.added.push_back({"<|endoftext|>", it->second});
  return assemble(std::move(tokens), std::vector<bool>(vocab.size(), true), rules, std::move(spec), what);
}

namespace {

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_text_file(path, kBpeWhere);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(kBpeWhere, fmt::format("{} is not valid JSON: {}", path, e.what()));
  }
}

}  // namespace

Bpe Bpe::load_files(const std::string& vocab_json, const std::string& merges_txt) {
  const nlohmann::json vocab = read_json(vocab_json);
  const std::string text = read_text_file(merges_txt, kBpeWhere);
  nlohmann::json merges = nlohmann::json::array();
  std::vector<size_t> lines;
  size_t start = 0, number = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++number;
    start = end + 1;
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    PARALLM_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                      line.find(' ', space + 1) == std::string::npos,
                  IoError, kBpeWhere, "{} line {}: \"{}\" is not two tokens separated by one space", merges_txt, number,
                  line);
    merges.push_back(line);
  }
  return from_model_json({{"type", "BPE"}, {"vocab", vocab}, {"merges", std::move(merges)}},
                         vocab_json + " + " + merges_txt);
}

Bpe Bpe::load_tokenizer_json(const std::string& path) {
  return from_tokenizer_json(read_json(path), path);
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

Bpe Bpe::load(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_dir(path);
  PARALLM_CHECK(fs::exists(path, ec), IoError, kBpeWhere, "tokenizer {} does not exist", path);
  return load_tokenizer_json(path);
}

std::string Bpe::token_text(int32_t id) const {
  return gpt2_printable(token_bytes(id));
}

std::vector<std::pair<int32_t, int32_t>> Bpe::merge_list() const {
  std::vector<std::pair<int32_t, int32_t>> out;
  out.reserve(t_->merges.size());
  for (const auto& m : t_->merges) out.emplace_back(m.left, m.right);
  return out;
}

nlohmann::json Bpe::model_json() const {
  nlohmann::json vocab = nlohmann::json::object();
  for (int32_t id = 0; id < vocab_size(); ++id)
    if (is_model_token(id)) vocab[token_text(id)] = id;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : merge_list()) merges.push_back(token_text(a) + " " + token_text(b));
  nlohmann::json j = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  if (spec_->ignore_merges) j["ignore_merges"] = true;
  return j;
}

bool Bpe::operator==(const Bpe& o) const {
  const BpeSpec &a = *spec_, &b = *o.spec_;
  const auto ranks = [](const Bpe& x) {
    std::vector<int32_t> r;
    for (const auto& m : x.t_->merges) r.push_back(m.rank);
    return r;
  };
  return t_->token_bytes == o.t_->token_bytes && t_->model == o.t_->model && merge_list() == o.merge_list() &&
         ranks(*this) == ranks(o) && a.pre.patterns() == b.pre.patterns() && a.nfc == b.nfc &&
         a.add_prefix_space == b.add_prefix_space && a.ignore_merges == b.ignore_merges && a.added == b.added &&
         a.prefix == b.prefix && a.suffix == b.suffix;
}

// Merges one piece of at most kShortPiece bytes: each pair's rank and merged id in an array, the lowest rank
// (leftmost first) merged, the two neighbouring pairs looked up again.
void Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const {
  const size_t n = piece.size();
  if (n == 1) return out.push_back(t_->byte_id[static_cast<unsigned char>(piece[0])]);
  if (spec_->ignore_merges)
    if (const int32_t id = t_->whole.find(piece, t_->token_bytes); id >= 0) return out.push_back(id);
  if (n > kShortPiece) return encode_long_piece(piece, out, s);
  int32_t* sym = s.sym.data();
  int32_t* rank = s.rank.data();
  for (size_t i = 0; i < n; ++i) sym[i] = t_->byte_id[static_cast<unsigned char>(piece[i])];
  const auto look = [&](size_t i) { rank[i] = t_->pairs.rank(sym[i], sym[i + 1]); };  // the pair at i, i + 1
  const auto* bytes = reinterpret_cast<const unsigned char*>(piece.data());
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = t_->byte_pairs[static_cast<size_t>(bytes[i] << 8 | bytes[i + 1])];
  size_t m = n;  // symbols left
  while (m > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoRank) break;
    sym[best] = t_->pairs.id_of(rank[best]);
    --m;
    std::copy(sym + best + 2, sym + m + 1, sym + best + 1);
    if (best + 1 < m) {  // the pairs after the merged one move down; the merged symbol's pair is new
      std::copy(rank + best + 2, rank + m, rank + best + 1);
      look(best);
    }
    if (best > 0) look(best - 1);
  }
  out.insert(out.end(), sym, sym + m);
}

// Merges a long piece as Hugging Face's BPE does: the symbols a linked list, the pairs in a heap by (rank,
// position), an entry whose pair has changed since it was pushed skipped when it comes up.
void Bpe::encode_long_piece(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const {
  const auto n = static_cast<int32_t>(piece.size());
  s.sym.resize(piece.size()), s.prev.resize(piece.size()), s.next.resize(piece.size());
  int32_t* sym = s.sym.data();
  int32_t* prev = s.prev.data();
  int32_t* next = s.next.data();
  auto& heap = s.heap;
  heap.clear();
  const auto push = [&](int32_t at) {  // the pair that starts at symbol `at`, if it merges
    if (at < 0 || next[at] >= n) return;
    if (const int32_t r = t_->pairs.rank(sym[at], sym[next[at]]); r != kNoRank) {
      heap.push_back(static_cast<uint64_t>(r) << 32 | static_cast<uint32_t>(at));
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = t_->byte_id[static_cast<unsigned char>(piece[static_cast<size_t>(i)])];
    prev[i] = i - 1, next[i] = i + 1;
  }
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto at = static_cast<int32_t>(top & 0xffffffffu);
    const auto r = static_cast<int32_t>(top >> 32);
    if (sym[at] < 0 || next[at] >= n) continue;
    const int32_t right = next[at];
    if (t_->pairs.rank(sym[at], sym[right]) != r) continue;  // stale
    sym[at] = t_->pairs.id_of(r);
    sym[right] = -1;
    next[at] = next[right];
    if (next[at] < n) prev[next[at]] = at;
    push(prev[at]);
    push(at);
  }
  for (int32_t i = 0; i < n; i = next[i]) out.push_back(sym[i]);
}

// The pieces of a text (no added tokens in it; normalized), each encoded once per call.
void Bpe::encode_text(std::string_view text, std::vector<int32_t>& out, Scratch& s) const {
  if (spec_->add_prefix_space && !text.empty() && text[0] != ' ') {
    std::string& prefixed = s.owned.emplace_back(1, ' ');
    prefixed += text;
    text = prefixed;
  }
  s.pieces.clear();
  spec_->pre.split(text, s.pieces);
  for (std::string_view piece : s.pieces) {
    if (piece.size() == 1) {
      out.push_back(t_->byte_id[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    bool fresh = false;
    PieceCache::Entry* e = s.seen.find_or_insert(piece, fresh);
    if (!fresh) {
      const size_t from = e->from, count = e->n;
      for (size_t i = from; i < from + count; ++i) {
        const int32_t id = out[i];
        out.push_back(id);
      }
      continue;
    }
    const size_t from = out.size();
    encode_piece(piece, out, s);
    e->from = from;  // the cache does not move while a piece is merged
    e->n = static_cast<uint32_t>(out.size() - from);
  }
}

// Checks the text, then: added tokens on the raw text, NFC on the rest, normalized added tokens, pieces.
void Bpe::encode_all(std::string_view text, bool match_added, std::vector<int32_t>& out) const {
  check_utf8(text, "the text to tokenize");
  Scratch s;
  s.sym.resize(kShortPiece), s.rank.resize(kShortPiece);
  out.reserve(out.size() + text.size() / 3);
  match_added = match_added && !added_->empty();
  const auto normalized = [&](std::string_view t) {
    std::string nfc;
    if (spec_->nfc && nfc_if_needed(t, nfc)) {
      s.owned.push_back(std::move(nfc));
      t = s.owned.back();
    }
    if (!match_added || !added_->has_normalized()) return encode_text(t, out, s);
    std::vector<TextPart> segments;
    added_->split(t, true, segments);
    for (const TextPart& g : segments) {
      if (g.id >= 0)
        out.push_back(g.id);
      else
        encode_text(g.text, out, s);
    }
  };
  if (!match_added) return normalized(text);
  s.segments.clear();
  added_->split(text, false, s.segments);
  for (const TextPart& g : s.segments) {
    if (g.id >= 0)
      out.push_back(g.id);
    else
      normalized(g.text);
  }
}

std::vector<int32_t> Bpe::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  encode_all(text, false, out);
  return out;
}

std::vector<int32_t> Bpe::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_all(text, true, out);
  return out;
}

std::vector<int32_t> Bpe::encode_with_template(std::string_view text) const {
  std::vector<int32_t> out = spec_->prefix;
  encode_all(text, true, out);
  out.insert(out.end(), spec_->suffix.begin(), spec_->suffix.end());
  return out;
}

std::string Bpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    PARALLM_CHECK(id >= 0 && id < vocab_size(), ConfigError, kBpeWhere, "token id {} is outside the vocabulary (0..{})",
                  id, vocab_size() - 1);
    const std::string& b = t_->token_bytes[static_cast<size_t>(id)];
    PARALLM_CHECK(!b.empty(), ConfigError, kBpeWhere, "token id {} is no token (the vocabulary has a hole there)", id);
    out += b;
  }
  return out;
}

}  // namespace parallm::data
