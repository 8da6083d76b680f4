// What this machine offers the process: the cores it may run on and the
// memory it has. Options that size thread pools or allocations are checked
// against these before anything is written or allocated.
#pragma once
#include <cstdint>
#include <string>

namespace parallm {

// Threads per usable core a thread option may ask for (train.threads,
// test-dist --threads, ...). Oversubscribing a little can help hide stalls;
// far more only slows down and, in the thousands, makes libgomp fail to
// create its threads or crash.
inline constexpr int kMaxThreadsPerCore = 4;

// Cores this process may run on: its sched_getaffinity mask (taskset,
// cgroups, a launcher's binding), else std::thread::hardware_concurrency; >= 1.
int usable_cores();
// The CPUs this process may run on (its sched_getaffinity mask), as bits:
// CPU i is bit i % 64 of words[i / 64]. All zero where the mask is unknown.
struct CpuMask {
  static constexpr int kWords = 16;  // 1024 CPUs, as cpu_set_t
  uint64_t words[kWords] = {};
  int count() const;
  bool overlaps(const CpuMask& other) const;
};
CpuMask affinity_mask();
// kMaxThreadsPerCore x usable_cores().
int max_threads();
// Throws ConfigError(where) naming `what` unless 0 <= n <= max_threads();
// the message gives the limit and the cores.
void check_thread_count(int64_t n, const std::string& where, const std::string& what);

// Seconds since this process started (the kernel's record: /proc/self/stat
// against /proc/uptime, so time spent before main, loading libraries or
// waiting for MPI, counts); 0 if unknown.
double process_age_s();

// Physical memory of this machine in bytes (sysconf pages x page size; 0 if unknown).
uint64_t physical_memory_bytes();

// Saturating arithmetic for size estimates: a result that would not fit is
// UINT64_MAX, which is more than any machine has.
inline uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
inline uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

}  // namespace parallm
