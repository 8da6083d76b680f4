// Rotary tables (rope.h): Hugging Face's fp32 frequency arithmetic, replayed
// operation by operation on the host.
#include "model/rope.h"

#include <cmath>

#include "core/error.h"

namespace parallm::model {

std::vector<float> rope_inv_freq(const GPTConfig& cfg) {
  const int64_t D = cfg.head_size(), half = D / 2;
  const float base = static_cast<float>(cfg.rope_theta);
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(D);  // fp32 exponent
    const float p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    inv[static_cast<size_t>(i)] = 1.0f / p;
  }
  const RopeScaling& r = cfg.rope_scaling;
  if (r.kind != RopeScaling::Kind::Llama3) return inv;
  // Llama 3: wavelengths above low_freq_wavelen are divided by factor, those
  // below high_freq_wavelen kept, those between blended smoothly.
  const float factor = static_cast<float>(r.factor), lo = static_cast<float>(r.low_freq_factor),
              hi = static_cast<float>(r.high_freq_factor), orig = static_cast<float>(r.original);
  const double low_wavelen = static_cast<double>(r.original) / r.low_freq_factor;
  const double high_wavelen = static_cast<double>(r.original) / r.high_freq_factor;
  for (float& f : inv) {
    const float wavelen = static_cast<float>(2.0 * M_PI) / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    if (wavelen < high_wavelen || wavelen > low_wavelen) {
      f = scaled;
      continue;
    }
    const float smooth = (orig / wavelen - lo) / (hi - lo);
    f = (1.0f - smooth) * scaled / factor + smooth * scaled;
  }
  return inv;
}

void rope_rows(float* out, const std::vector<float>& inv_freq, const int64_t* pos, int64_t n) {
  const int64_t half = static_cast<int64_t>(inv_freq.size()), D = 2 * half;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[r]) * inv_freq[static_cast<size_t>(i)];  // an fp32 product
      out[r * D + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      out[r * D + half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
}

RopeTable::RopeTable(const GPTConfig& cfg, Device dev, int64_t max_rows) : dev_(dev) {
  if (!cfg.llama()) return;
  inv_ = rope_inv_freq(cfg);
  table_ = DeviceArray<float>(static_cast<size_t>(max_rows) * 2 * inv_.size(), MemCategory::Activations, dev_);
}

const float* RopeTable::rows(int64_t T, int64_t start, const CpRuns& runs) {
  // The key of the positions: (T, start) or the runs; the table is rebuilt (an upload) only when it changes.
  Key key{T, start, runs.n};
  for (int i = 0; i < runs.n; ++i)
    key[3 + 3 * i] = runs.run[i].local, key[4 + 3 * i] = runs.run[i].global, key[5 + 3 * i] = runs.run[i].len;
  if (key == key_ && table_.data()) return table_.data();
  std::vector<int64_t> pos(static_cast<size_t>(T));
  if (runs.n == 0) {
    for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = start + t;
  } else {
    for (const CpRun& r : runs)
      for (int64_t j = 0; j < r.len; ++j) pos[static_cast<size_t>(r.local + j)] = r.global + j;
  }
  const int64_t D = 2 * static_cast<int64_t>(inv_.size());
  std::vector<float> host(static_cast<size_t>(T * D));
  rope_rows(host.data(), inv_, pos.data(), T);
  if (table_.size() < host.size()) table_ = DeviceArray<float>(host.size(), MemCategory::Activations, dev_);
  table_.copy_from_host(host.data(), host.size());
  key_ = key;
  return table_.data();
}

}  // namespace parallm::model
