#include "data/loader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/rng.h"
#include "data/prepare.h"

namespace parallm::data {

TokenFile::TokenFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  PARALLM_CHECK(fd >= 0, IoError, "data.open", "cannot open {}: {} (prepare the dataset first: parallm prepare ...)",
                path, std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ % 2 != 0) {
    ::close(fd);
    throw IoError("data.open", fmt::format("{} has an odd size ({} bytes); expected uint16 tokens", path, map_bytes_));
  }
  n_ = static_cast<int64_t>(map_bytes_ / 2);
  if (map_bytes_ > 0) {
    void* p = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    PARALLM_CHECK(p != MAP_FAILED, IoError, "data.open", "cannot map {}: {}", path, std::strerror(errno));
    data_ = static_cast<const uint16_t*>(p);
  } else {
    ::close(fd);
  }
}

TokenFile::~TokenFile() {
  if (data_) ::munmap(const_cast<uint16_t*>(data_), map_bytes_);
}

Loader::Loader(const std::string& dir, int64_t vocab_size, BatchSpec spec, uint64_t seed)
    : train_(dir + "/train.bin"), val_(dir + "/val.bin"), spec_(spec), seed_(seed) {
  for (const TokenFile* f : {&train_, &val_}) {
    PARALLM_CHECK(f->size() > spec.seq_len + 1, ConfigError, "data.loader",
                  "{} has {} tokens, fewer than block_size + 2 = {}", f->path(), f->size(), spec.seq_len + 2);
    // One pass over the tokens at startup: a wrong vocab_size fails here, not mid-run.
    uint16_t mx = 0;
    for (int64_t i = 0; i < f->size(); ++i) mx = std::max(mx, f->data()[i]);
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
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t g = static_cast<uint64_t>((micro * spec_.world + spec_.rank) * B + b);
    const int64_t start = static_cast<int64_t>(random_below(range, seed_, stream, g));
    const uint16_t* src = f.data() + start;
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = src[t];
      y[b * T + t] = src[t + 1];
    }
  }
}

}  // namespace parallm::data
