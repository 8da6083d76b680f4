#include "core/host.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace parallm {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int max_threads() {
  return kMaxThreadsPerCore * usable_cores();
}

void check_thread_count(int64_t n, const std::string& where, const std::string& what) {
  const int cores = usable_cores(), limit = max_threads();
  PARALLM_CHECK(n >= 0 && n <= limit, ConfigError, where,
                "{}={} is out of range: it must be in [0, {}] ({} threads per core on the {} core{} this process may "
                "use; 0 = OMP_NUM_THREADS or all cores); use at most {}",
                what, n, limit, kMaxThreadsPerCore, cores, cores == 1 ? "" : "s", limit);
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? sat_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page)) : 0;
}

}  // namespace parallm
