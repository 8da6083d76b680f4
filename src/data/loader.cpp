#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/prepare.h"

namespace parallm::data {

namespace {
std::string prepare_hint(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return fmt::format("; prepare the dataset first (`parallm prepare shakespeare_char --out {}`)",
                     dir.empty() ? "." : dir);
}
}  // namespace

TokenDtype token_dtype_for(int64_t vocab_size) {
  return vocab_size > 65536 ? TokenDtype::kU32 : TokenDtype::kU16;
}

const char* token_dtype_name(TokenDtype d) {
  return d == TokenDtype::kU16 ? "uint16" : "uint32";
}

TokenDtype token_dtype_of_meta(const nlohmann::json& meta, const std::string& path) {
  if (!meta.contains("dtype")) return TokenDtype::kU16;
  const nlohmann::json& d = meta["dtype"];
  if (d == "uint16") return TokenDtype::kU16;
  if (d == "uint32") return TokenDtype::kU32;
  throw IoError("data.open", fmt::format("{} says the token files hold dtype {}: expected \"uint16\" or \"uint32\"",
                                         path, d.dump()));
}

TokenFile::TokenFile(const std::string& path, TokenDtype dtype)
    : file_(path, "data.open", prepare_hint(path)), dtype_(dtype) {
  const size_t w = token_dtype_bytes(dtype);
  PARALLM_CHECK(file_.size() % w == 0, IoError, "data.open",
                "{} has {} bytes, not a whole number of {} ids ({} bytes each): its tail is torn; prepare the "
                "dataset again",
                path, file_.size(), token_dtype_name(dtype), w);
  n_ = static_cast<int64_t>(file_.size() / w);
}

void TokenFile::read(int64_t start, int64_t count, uint32_t* out) const {
  const size_t w = token_dtype_bytes(dtype_);
  const size_t want = static_cast<size_t>(count) * w;
  if (file_.read_at(static_cast<size_t>(start) * w, out, want) == want) {
    if (dtype_ == TokenDtype::kU16) {  // widen in place, from the back (uint16 i lies below uint32 i)
      const auto* bytes = reinterpret_cast<const unsigned char*>(out);
      for (int64_t i = count - 1; i >= 0; --i) {
        uint16_t v;
        std::memcpy(&v, bytes + 2 * i, 2);
        out[i] = v;
      }
    }
    return;
  }
  throw IoError("data.read", fmt::format("{} shrank from {} to {} bytes while the run was using it: something "
                                         "truncated or rewrote it; restore the dataset (or prepare it again) and "
                                         "resume from the last checkpoint",
                                         path(), static_cast<size_t>(n_) * w, file_.current_size()));
}

uint32_t TokenFile::max_token() const {
  std::vector<uint32_t> buf(int64_t{1} << 20);
  uint32_t mx = 0;
  for (int64_t at = 0; at < n_; at += static_cast<int64_t>(buf.size())) {
    const int64_t count = std::min<int64_t>(static_cast<int64_t>(buf.size()), n_ - at);
    read(at, count, buf.data());
    mx = std::max(mx, *std::max_element(buf.begin(), buf.begin() + count));
  }
  return mx;
}

namespace {
// meta.json's dtype where the dataset has a meta.json (a bare pair of uint16 files may not).
TokenDtype dataset_dtype(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/meta.json", ec)) return TokenDtype::kU16;
  return token_dtype_of_meta(read_dataset_meta(dir), dir + "/meta.json");
}
}  // namespace

Loader::Loader(const std::string& dir, int64_t vocab_size, BatchSpec spec, uint64_t seed)
    : dtype_(dataset_dtype(dir)),
      train_(dir + "/train.bin", dtype_),
      val_(dir + "/val.bin", dtype_),
      spec_(spec),
      seed_(seed),
      row_(static_cast<size_t>(spec.seq_len) + 1) {
  for (const int64_t p : spec_.positions)
    PARALLM_CHECK(p >= 0 && p < spec.seq_len, ShapeError, "data.loader", "position {} is outside a sequence of {}", p,
                  spec.seq_len);
  for (const TokenFile* f : {&train_, &val_}) {
    PARALLM_CHECK(f->size() > spec.seq_len + 1, ConfigError, "data.loader",
                  "{} has {} tokens, fewer than block_size + 2 = {}", f->path(), f->size(), spec.seq_len + 2);
    // One pass over the tokens at startup: a wrong vocab_size fails here, not mid-run.
    const uint32_t mx = f->max_token();
    PARALLM_CHECK(mx < vocab_size, ConfigError, "data.loader", "{} holds token id {} but the vocabulary has {} entries",
                  f->path(), mx, vocab_size);
  }
  // meta.json (where it records them) must describe these very files: a
  // dataset half rewritten by another prepare fails here, not with wrong samples.
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/meta.json", ec)) return;
  const nlohmann::json meta = read_dataset_meta(dir);
  for (const auto& [key, f] : {std::pair{"train_tokens", &train_}, std::pair{"val_tokens", &val_}}) {
    if (!meta.contains(key) || !meta[key].is_number_integer()) continue;
    PARALLM_CHECK(meta[key].get<int64_t>() == f->size(), IoError, "data.loader",
                  "{} has {} tokens but {}/meta.json says {} = {}: the dataset is inconsistent; prepare it again",
                  f->path(), f->size(), dir, key, meta[key].get<int64_t>());
  }
}

void Loader::get(Split split, int64_t step, int64_t micro, int32_t* x, int32_t* y, bool eval) const {
  const TokenFile& f = split == Split::Train ? train_ : val_;
  const int64_t B = spec_.batch_size, T = spec_.seq_len;
  const uint64_t stream = stream_id(kRngData, static_cast<uint64_t>(split), static_cast<uint64_t>(step), eval ? 1 : 0);
  const uint64_t range = static_cast<uint64_t>(f.size() - T);  // start in [0, n - T - 1], as torch.randint(n - T)
  const uint32_t* src = row_.data();
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t g = static_cast<uint64_t>((micro * spec_.world + spec_.rank) * B + b);
    const int64_t start = static_cast<int64_t>(random_below(range, seed_, stream, g));
    f.read(start, T + 1, row_.data());
    if (!spec_.positions.empty()) {  // context parallel: this rank's positions, each with its own target
      const auto Tl = static_cast<int64_t>(spec_.positions.size());
      for (int64_t i = 0; i < Tl; ++i) {
        const int64_t t = spec_.positions[static_cast<size_t>(i)];
        x[b * Tl + i] = static_cast<int32_t>(src[t]);
        y[b * Tl + i] = static_cast<int32_t>(src[t + 1]);
      }
      continue;
    }
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = static_cast<int32_t>(src[t]);
      y[b * T + t] = static_cast<int32_t>(src[t + 1]);
    }
  }
}

}  // namespace parallm::data
