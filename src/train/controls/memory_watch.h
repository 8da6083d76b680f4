// The resident-memory watchdog: each step reads this process's resident set
// (/proc/self/statm, one small read), rank 0's goes into the step's record
// (`rss_mb`), and every rank warns, once, when its own grows steadily: over
// the last kWindow steps after kWarmup, by more than max(4 MiB, 1% of itself),
// rising at no fewer than 3 in 4 steps and never falling by more than it rose
// in the window's first step. A run's steps allocate nothing (buffers are
// carved once), so such growth is a leak somewhere: the warning names the
// rank, the growth and the rate, so it is seen long before the OOM killer.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace parallm::train {

class MemoryWatch {
 public:
  static constexpr int64_t kWarmup = 10, kWindow = 20;
  // This process's resident bytes now (0 where /proc is not readable).
  static int64_t resident_bytes();
  // Step `it`'s reading; the warning to log (once) where it shows a steady leak.
  std::optional<std::string> step(int64_t it, int64_t rss_bytes, int rank);

 private:
  std::deque<int64_t> window_;
  int64_t seen_ = 0;
  bool warned_ = false;
};

}  // namespace parallm::train
