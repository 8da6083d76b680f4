#include "data/vocab.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/prepare.h"

namespace parallm::data {

CharVocab CharVocab::load(const std::string& data_dir) {
  const std::string path = data_dir + "/meta.json";
  const nlohmann::json meta = read_dataset_meta(data_dir);
  constexpr const char* fix = "prepare the dataset again (parallm prepare ...)";
  PARALLM_CHECK(meta.contains("itos") && meta["itos"].is_array(), IoError, "data.vocab",
                "{} has no itos list (the character of each token id); {}", path, fix);
  PARALLM_CHECK(meta.contains("vocab_size") && meta["vocab_size"].is_number_integer(), IoError, "data.vocab",
                "{} has no integer vocab_size; {}", path, fix);
  PARALLM_CHECK(meta["vocab_size"].get<int64_t>() == static_cast<int64_t>(meta["itos"].size()), IoError, "data.vocab",
                "{} says vocab_size {} but its itos list has {} characters; {}", path, meta["vocab_size"].dump(),
                meta["itos"].size(), fix);
  CharVocab v;
  for (const auto& s : meta["itos"]) {
    const auto id = v.itos_.size();
    PARALLM_CHECK(s.is_string(), IoError, "data.vocab", "{}: itos entry {} (id {}) is not a string; {}", path, s.dump(),
                  id, fix);
    auto cps = decode_utf8(s.get<std::string>(), path);
    PARALLM_CHECK(cps.size() == 1, IoError, "data.vocab", "{}: itos entry {} (id {}) is not one character; {}", path,
                  s.dump(), id, fix);
    PARALLM_CHECK(v.stoi_.emplace(cps[0], static_cast<int32_t>(id)).second, IoError, "data.vocab",
                  "{}: itos entry {} (id {}) repeats id {}; {}", path, s.dump(), id, v.stoi_[cps[0]], fix);
    v.itos_.push_back(cps[0]);
  }
  return v;
}

std::vector<int32_t> CharVocab::encode(const std::string& text) const {
  std::vector<int32_t> out;
  for (char32_t cp : decode_utf8(text, "prompt")) {
    auto it = stoi_.find(cp);
    PARALLM_CHECK(it != stoi_.end(), ConfigError, "data.vocab", "character \"{}\" (U+{:04X}) is not in the vocabulary",
                  encode_utf8(cp), static_cast<uint32_t>(cp));
    out.push_back(it->second);
  }
  return out;
}

std::string CharVocab::decode(const std::vector<int32_t>& tokens) const {
  std::string s;
  for (int32_t t : tokens) s += (t >= 0 && t < size()) ? encode_utf8(itos_[t]) : "\xEF\xBF\xBD";
  return s;
}

}  // namespace parallm::data
