#include "data/bpe_train.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/fileio.h"
#include "core/timer.h"
#include "data/prepare.h"
#include "data/prepare_bpe.h"

namespace parallm::data {

namespace {

namespace fs = std::filesystem;
constexpr const char* kBpeTrainWhere = "data.bpe_train";

uint64_t key_of(int32_t a, int32_t b) {
  return static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b);
}

// The merge loop's state: the distinct pieces as token ids, their counts,
// each pair's count and the pieces that (may) hold it.
class Trainer {
 public:
  explicit Trainer(const std::unordered_map<std::string, int64_t>& pieces) {
    for (int b = 0; b < 256; ++b) bytes_.emplace_back(1, static_cast<char>(b));
    for (const auto& [piece, n] : pieces) {
      if (piece.size() < 2) continue;  // nothing to merge
      std::vector<int32_t> w;
      for (unsigned char c : piece) w.push_back(c);
      words_.push_back(std::move(w));
      freq_.push_back(n);
    }
    // A fixed order of the words (the map's is not), so ties in the heap are all that order decides.
    std::vector<size_t> order(words_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return words_[x] < words_[y]; });
    std::vector<std::vector<int32_t>> w;
    std::vector<int64_t> f;
    for (size_t i : order) w.push_back(std::move(words_[i])), f.push_back(freq_[i]);
    words_.swap(w), freq_.swap(f);
    for (size_t i = 0; i < words_.size(); ++i) add_pairs(static_cast<int32_t>(i), +1);
    for (const auto& [k, c] : count_) heap_.push({c, k});
  }

  // Merges until the vocabulary has `tokens` entries (or no pair is left).
  void run(int64_t tokens) {
    while (static_cast<int64_t>(bytes_.size()) < tokens) {
      const auto best = next_pair();
      if (!best) break;
      merge(*best);
    }
  }

  std::vector<std::string> bytes_;                   // id -> token bytes
  std::vector<std::pair<int32_t, int32_t>> merges_;  // by rank

 private:
  struct Entry {
    int64_t count;
    uint64_t key;
  };
  // Whether a goes below b in the heap: a smaller count, or the same with a later pair by its tokens' bytes.
  struct Lower {
    const Trainer* t;
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.count != b.count) return a.count < b.count;
      return t->pair_bytes(a.key) > t->pair_bytes(b.key);
    }
  };
  std::pair<std::string_view, std::string_view> pair_bytes(uint64_t k) const {
    return {bytes_[k >> 32], bytes_[k & 0xffffffffu]};
  }

  void add_pairs(int32_t w, int sign) {
    const auto& s = words_[static_cast<size_t>(w)];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = key_of(s[i], s[i + 1]);
      count_[k] += sign * freq_[static_cast<size_t>(w)];
      if (sign > 0) where_[k].insert(w);
      touched_.insert(k);
    }
  }

  std::optional<uint64_t> next_pair() {
    while (!heap_.empty()) {
      const Entry e = heap_.top();
      heap_.pop();
      const auto it = count_.find(e.key);
      if (it != count_.end() && it->second == e.count && e.count > 0) return e.key;  // else stale
    }
    return std::nullopt;
  }

  void merge(uint64_t k) {
    const auto a = static_cast<int32_t>(k >> 32), b = static_cast<int32_t>(k & 0xffffffffu);
    const std::string joined = bytes_[static_cast<size_t>(a)] + bytes_[static_cast<size_t>(b)];
    auto [id, fresh] = id_of_.try_emplace(joined, static_cast<int32_t>(bytes_.size()));
    if (fresh) bytes_.push_back(joined);
    merges_.emplace_back(a, b);
    const int32_t c = id->second;
    touched_.clear();
    const std::vector<int32_t> holders(where_[k].begin(), where_[k].end());
    for (int32_t w : holders) {
      auto& s = words_[static_cast<size_t>(w)];
      add_pairs(w, -1);
      std::vector<int32_t> out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(c);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s.swap(out);
      add_pairs(w, +1);
    }
    count_.erase(k);
    where_.erase(k);
    for (uint64_t t : touched_)
      if (const auto it = count_.find(t); it != count_.end() && it->second > 0) heap_.push({it->second, t});
  }

  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> freq_;
  std::unordered_map<uint64_t, int64_t> count_;
  std::unordered_map<uint64_t, std::unordered_set<int32_t>> where_;
  std::unordered_map<std::string, int32_t> id_of_;  // merged tokens' bytes -> id
  std::unordered_set<uint64_t> touched_;
  std::priority_queue<Entry, std::vector<Entry>, Lower> heap_{Lower{this}};
};

}  // namespace

BpeTrainResult train_bpe(const std::vector<std::string>& files, int64_t vocab_size) {
  PARALLM_CHECK(vocab_size >= 257 && vocab_size <= 65536, ConfigError, kBpeTrainWhere,
                "vocab_size {}: expected 257 (the 256 bytes and <|endoftext|>) to 65536 (uint16 token files)",
                vocab_size);
  Timer timer;
  std::unordered_map<std::string, int64_t> pieces;
  BpeTrainResult r;
  for_each_chunk(expand_inputs(files), int64_t{4} << 20, [&](std::string_view text, const std::string& where) {
    r.bytes += static_cast<int64_t>(text.size());
    try {
      for (std::string_view p : gpt2_pretokenize(text)) {
        ++pieces[std::string(p)];
        ++r.pieces;
      }
    } catch (const Error& e) {
      throw ConfigError(kBpeTrainWhere, fmt::format("{}: {}", where, e.message()));
    }
  });
  PARALLM_CHECK(r.bytes > 0, ConfigError, kBpeTrainWhere,
                "the input ({}) holds no text (0 bytes): there is nothing to train a tokenizer on; nothing was written",
                fmt::join(files, ", "));
  r.distinct = static_cast<int64_t>(pieces.size());
  r.count_seconds = timer.seconds();
  Timer merging;
  Trainer t(pieces);
  t.run(vocab_size - 1);
  r.merge_seconds = merging.seconds();
  std::vector<std::pair<std::string, int32_t>> vocab;
  for (size_t id = 0; id < t.bytes_.size(); ++id)
    vocab.emplace_back(gpt2_printable(t.bytes_[id]), static_cast<int32_t>(id));
  vocab.emplace_back("<|endoftext|>", static_cast<int32_t>(t.bytes_.size()));
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& [a, b] : t.merges_)
    merges.emplace_back(gpt2_printable(t.bytes_[static_cast<size_t>(a)]),
                        gpt2_printable(t.bytes_[static_cast<size_t>(b)]));
  r.bpe = Bpe::from_lists(vocab, merges, "the trained tokenizer");
  return r;
}

void write_bpe_files(const Bpe& bpe, const std::string& dir) {
  make_directories(dir, kBpeTrainWhere, "tokenizer directory");
  const nlohmann::json model = bpe.model_json();
  const std::string vocab = model["vocab"].dump() + "\n";
  std::string merges = "#version: 0.2\n";
  for (const auto& m : model["merges"]) merges += m.get<std::string>() + "\n";
  write_file_atomic((fs::path(dir) / "vocab.json").string(), {{vocab.data(), vocab.size()}});
  write_file_atomic((fs::path(dir) / "merges.txt").string(), {{merges.data(), merges.size()}});
  const std::string tokenizer = bpe.tokenizer_json().dump() + "\n";
  write_file_atomic((fs::path(dir) / "tokenizer.json").string(), {{tokenizer.data(), tokenizer.size()}});
}

}  // namespace parallm::data
