#include "data/vocab.h"

#include "core/error.h"
#include "data/prepare.h"

namespace parallm::data {

namespace {
constexpr const char* kFix = "prepare the dataset again (parallm prepare ...)";
constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

Vocab Vocab::load(const std::string& data_dir) {
  return of_meta(read_dataset_meta(data_dir), data_dir + "/meta.json");
}

Vocab Vocab::of_bpe(std::shared_ptr<const Bpe> bpe) {
  Vocab v;
  v.bpe_ = std::move(bpe);
  return v;
}

Vocab Vocab::of_meta(const nlohmann::json& meta, const std::string& path) {
  PARALLM_CHECK(meta.contains("vocab_size") && meta["vocab_size"].is_number_integer(), IoError, "data.vocab",
                "{} has no integer vocab_size; {}", path, kFix);
  const auto n = meta["vocab_size"].get<int64_t>();
  if (meta.contains("bpe")) {
    auto bpe = std::make_shared<const Bpe>(Bpe::from_definition(meta["bpe"], path + " bpe"));
    PARALLM_CHECK(bpe->vocab_size() == n, IoError, "data.vocab", "{} says vocab_size {} but its tokenizer has {}; {}",
                  path, n, bpe->vocab_size(), kFix);
    return of_bpe(std::move(bpe));
  }
  PARALLM_CHECK(meta.contains("itos") && meta["itos"].is_array(), IoError, "data.vocab",
                "{} has neither an itos list (the character of each token id) nor a bpe tokenizer; {}", path, kFix);
  PARALLM_CHECK(n == static_cast<int64_t>(meta["itos"].size()), IoError, "data.vocab",
                "{} says vocab_size {} but its itos list has {} characters; {}", path, n, meta["itos"].size(), kFix);
  Vocab v;
  for (const auto& s : meta["itos"]) {
    const auto id = v.itos_.size();
    PARALLM_CHECK(s.is_string(), IoError, "data.vocab", "{}: itos entry {} (id {}) is not a string; {}", path, s.dump(),
                  id, kFix);
    auto cps = decode_utf8(s.get<std::string>(), path);
    PARALLM_CHECK(cps.size() == 1, IoError, "data.vocab", "{}: itos entry {} (id {}) is not one character; {}", path,
                  s.dump(), id, kFix);
    PARALLM_CHECK(v.stoi_.emplace(cps[0], static_cast<int32_t>(id)).second, IoError, "data.vocab",
                  "{}: itos entry {} (id {}) repeats id {}; {}", path, s.dump(), id, v.stoi_[cps[0]], kFix);
    v.itos_.push_back(cps[0]);
  }
  return v;
}

int64_t Vocab::size() const {
  return bpe_ ? bpe_->vocab_size() : static_cast<int64_t>(itos_.size());
}

std::string Vocab::describe() const {
  return fmt::format("{} {}", size(), bpe_ ? "BPE tokens" : "characters");
}

bool Vocab::operator==(const Vocab& o) const {
  if (is_bpe() != o.is_bpe()) return false;
  return bpe_ ? *bpe_ == *o.bpe_ : itos_ == o.itos_;
}

std::vector<int32_t> Vocab::encode(const std::string& text) const {
  if (bpe_) return bpe_->encode(text);
  std::vector<int32_t> out;
  for (char32_t cp : decode_utf8(text, "prompt")) {
    auto it = stoi_.find(cp);
    PARALLM_CHECK(it != stoi_.end(), ConfigError, "data.vocab", "character \"{}\" (U+{:04X}) is not in the vocabulary",
                  encode_utf8(cp), static_cast<uint32_t>(cp));
    out.push_back(it->second);
  }
  return out;
}

std::string Vocab::decode(const std::vector<int32_t>& tokens) const {
  std::string s;
  for (int32_t t : tokens) {
    if (t < 0 || t >= size())
      s += kReplacement;
    else
      s += bpe_ ? bpe_->token_bytes(t) : encode_utf8(itos_[static_cast<size_t>(t)]);
  }
  return s;
}

}  // namespace parallm::data
