#include "train/records/metrics.h"

#include <unistd.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace parallm::train {

Progress::Progress(int64_t first, int64_t last, bool enabled)
    : active_(enabled && ::isatty(STDOUT_FILENO)), first_(first), last_(last) {}

Progress::~Progress() {
  if (active_) clear();
}

void Progress::clear() {
  std::fputs("\r\033[K", stdout);
  std::fflush(stdout);
}

void Progress::draw() {
  const int width = 30;
  const double frac = last_ > first_ ? double(iter_ - first_) / double(last_ - first_) : 1.0;
  const int filled = std::clamp(static_cast<int>(frac * width), 0, width);
  std::string bar(filled, '#');
  bar += std::string(width - filled, '.');
  std::fprintf(stdout, "\r\033[K[%s] %3d%% iter %lld/%lld %s", bar.c_str(), static_cast<int>(frac * 100),
               static_cast<long long>(iter_), static_cast<long long>(last_), status_.c_str());
  std::fflush(stdout);
}

void Progress::update(int64_t iter, const std::string& status) {
  iter_ = iter;
  status_ = status;
  if (active_) draw();
}

void Progress::print(const std::string& line) {
  if (active_) clear();
  log::info("{}", line);
  if (active_) draw();
}

}  // namespace parallm::train
