// The resident-memory watchdog (memory_watch.h).
#include "train/controls/memory_watch.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace parallm::train {

int64_t MemoryWatch::resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return got == 2 ? static_cast<int64_t>(resident) * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

std::optional<std::string> MemoryWatch::step(int64_t it, int64_t rss_bytes, int rank) {
  if (rss_bytes <= 0 || ++seen_ <= kWarmup || warned_) return std::nullopt;
  window_.push_back(rss_bytes);
  if (static_cast<int64_t>(window_.size()) > kWindow) window_.pop_front();
  if (static_cast<int64_t>(window_.size()) < kWindow) return std::nullopt;
  const int64_t grew = window_.back() - window_.front();
  int64_t rises = 0;
  for (size_t i = 1; i < window_.size(); ++i) rises += window_[i] > window_[i - 1];
  const int64_t bar = std::max<int64_t>(int64_t{4} << 20, window_.front() / 100);
  if (grew <= bar || 4 * rises < 3 * (kWindow - 1)) return std::nullopt;
  warned_ = true;
  const double mib = static_cast<double>(grew) / (1 << 20);
  return fmt::format(
      "resident memory of rank {} grew by {:.1f} MiB over the {} steps to iteration {} ({:.0f} KiB a step, rising "
      "at {} of them; now {:.0f} MiB): a leak? Training allocates nothing per step; watch rss_mb in metrics.jsonl",
      rank, mib, kWindow - 1, it, mib * 1024 / static_cast<double>(kWindow - 1), rises,
      static_cast<double>(window_.back()) / (1 << 20));
}

}  // namespace parallm::train
