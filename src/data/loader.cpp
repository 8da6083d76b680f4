#include "data/loader.h"

#include <algorithm>
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

TokenFile::TokenFile(const std::string& path) : file_(path, "data.open", prepare_hint(path)) {
  PARALLM_CHECK(file_.size() % 2 == 0, IoError, "data.open",
                "{} has an odd size ({} bytes) but holds uint16 tokens: prepare the dataset again", path, file_.size());
  n_ = static_cast<int64_t>(file_.size() / 2);
}

void TokenFile::read(int64_t start, int64_t count, uint16_t* out) const {
  const size_t want = static_cast<size_t>(count) * 2;
  if (file_.read_at(static_cast<size_t>(start) * 2, out, want) == want) return;
  throw IoError("data.read", fmt::format("{} shrank from {} to {} bytes while the run was using it: something "
                                         "truncated or rewrote it; restore the dataset (or prepare it again) and "
                                         "resume from the last checkpoint",
                                         path(), static_cast<size_t>(n_) * 2, file_.current_size()));
}

uint16_t TokenFile::max_token() const {
  std::vector<uint16_t> buf(int64_t{1} << 20);
  uint16_t mx = 0;
  for (int64_t at = 0; at < n_; at += static_cast<int64_t>(buf.size())) {
    const int64_t count = std::min<int64_t>(static_cast<int64_t>(buf.size()), n_ - at);
    read(at, count, buf.data());
    mx = std::max(mx, *std::max_element(buf.begin(), buf.begin() + count));
  }
  return mx;
}

Loader::Loader(const std::string& dir, int64_t vocab_size, BatchSpec spec, uint64_t seed)
    : train_(dir + "/train.bin"),
      val_(dir + "/val.bin"),
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
    const uint16_t mx = f->max_token();
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
  uint16_t* src = row_.data();
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t g = static_cast<uint64_t>((micro * spec_.world + spec_.rank) * B + b);
    const int64_t start = static_cast<int64_t>(random_below(range, seed_, stream, g));
    f.read(start, T + 1, src);
    if (!spec_.positions.empty()) {  // context parallel: this rank's positions, each with its own target
      const auto Tl = static_cast<int64_t>(spec_.positions.size());
      for (int64_t i = 0; i < Tl; ++i) {
        const int64_t t = spec_.positions[static_cast<size_t>(i)];
        x[b * Tl + i] = src[t];
        y[b * Tl + i] = src[t + 1];
      }
      continue;
    }
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = src[t];
      y[b * T + t] = src[t + 1];
    }
  }
}

}  // namespace parallm::data
