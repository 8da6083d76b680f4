// Character vocabulary of a prepared dataset (meta.json): encodes prompts,
// decodes samples.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace parallm::data {

class CharVocab {
 public:
  // Reads data_dir/meta.json, strictly: an itos list of one-character strings,
  // no character twice, as many as its vocab_size (IoError naming the entry).
  static CharVocab load(const std::string& data_dir);
  int64_t size() const { return static_cast<int64_t>(itos_.size()); }
  bool operator==(const CharVocab& o) const { return itos_ == o.itos_; }
  // Throws ConfigError naming the first character not in the vocabulary.
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& tokens) const;

 private:
  std::vector<char32_t> itos_;
  std::map<char32_t, int32_t> stoi_;
};

}  // namespace parallm::data
