#include "core/allocator.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace parallm {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Params:
      return "params";
    case MemCategory::Grads:
      return "grads";
    case MemCategory::OptState:
      return "optimizer";
    case MemCategory::Activations:
      return "activations";
    case MemCategory::Comm:
      return "comm";
    case MemCategory::Scratch:
      return "scratch";
    case MemCategory::Offloaded:
      return "offloaded";
    case MemCategory::Other:
      return "other";
    default:
      return "?";
  }
}

HostAllocator& HostAllocator::instance() {
  static HostAllocator a;
  return a;
}

static void bump_peak(std::atomic<size_t>& peak, size_t v) {
  size_t p = peak.load(std::memory_order_relaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}

void* HostAllocator::allocate(size_t bytes, MemCategory cat) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  PARALLM_CHECK(p != nullptr, Error, "alloc", "out of host memory allocating {} for {}", format_bytes(bytes),
                mem_category_name(cat));
  std::memset(p, 0, rounded);
  acct_.add(bytes, cat);
  return p;
}

void HostAllocator::deallocate(void* p, size_t bytes, MemCategory cat) {
  if (!p) return;
  std::free(p);
  acct_.sub(bytes, cat);
}

void MemAccounting::add(size_t bytes, MemCategory cat) {
  int c = static_cast<int>(cat);
  bump_peak(peak_[c], cur_[c].fetch_add(bytes) + bytes);
  bump_peak(total_peak_, total_cur_.fetch_add(bytes) + bytes);
}

void MemAccounting::sub(size_t bytes, MemCategory cat) {
  cur_[static_cast<int>(cat)].fetch_sub(bytes);
  total_cur_.fetch_sub(bytes);
}

MemStats MemAccounting::stats() const {
  MemStats s;
  for (int i = 0; i < static_cast<int>(MemCategory::kCount); ++i) {
    s.current[i] = cur_[i].load();
    s.peak[i] = peak_[i].load();
  }
  s.total_current = total_cur_.load();
  s.total_peak = total_peak_.load();
  return s;
}

void MemAccounting::reset_peaks() {
  for (int i = 0; i < static_cast<int>(MemCategory::kCount); ++i) peak_[i].store(cur_[i].load());
  total_peak_.store(total_cur_.load());
}

std::string format_bytes(size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace parallm
