#include "data/vocab.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/prepare.h"

namespace parallm::data {

CharVocab CharVocab::load(const std::string& data_dir) {
  const std::string path = data_dir + "/meta.json";
  const nlohmann::json meta = read_dataset_meta(data_dir);
  PARALLM_CHECK(meta.contains("itos") && meta["itos"].is_array(), IoError, "data.vocab", "{} has no itos list", path);
  CharVocab v;
  for (const auto& s : meta["itos"]) {
    PARALLM_CHECK(s.is_string(), IoError, "data.vocab", "{}: itos entry {} is not a string", path, s.dump());
    auto cps = decode_utf8(s.get<std::string>(), path);
    PARALLM_CHECK(cps.size() == 1, IoError, "data.vocab", "{}: itos entry \"{}\" is not one character", path,
                  s.get<std::string>());
    v.stoi_[cps[0]] = static_cast<int32_t>(v.itos_.size());
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
