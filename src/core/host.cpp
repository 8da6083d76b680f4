#include "core/host.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace parallm {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int CpuMask::count() const {
  int n = 0;
  for (uint64_t w : words) n += __builtin_popcountll(w);
  return n;
}

bool CpuMask::overlaps(const CpuMask& other) const {
  for (int i = 0; i < kWords; ++i)
    if (words[i] & other.words[i]) return true;
  return false;
}

CpuMask affinity_mask() {
  CpuMask m;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return m;
  for (int cpu = 0; cpu < CpuMask::kWords * 64 && cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) m.words[cpu / 64] |= uint64_t{1} << (cpu % 64);
  return m;
}

int max_threads() {
  return kMaxThreadsPerCore * usable_cores();
}

void check_thread_count(int64_t n, const std::string& where, const std::string& what) {
  const int cores = usable_cores(), limit = max_threads();
  PARALLM_CHECK(n >= 0 && n <= limit, ConfigError, where,
                "{}={} is out of range: it must be in [0, {}] ({} threads per core on the {} core{} this process may "
                "use; 0 = OMP_NUM_THREADS or the cores per rank); use at most {}",
                what, n, limit, kMaxThreadsPerCore, cores, cores == 1 ? "" : "s", limit);
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? sat_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page)) : 0;
}

double process_age_s() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text;
  double up = 0;
  if (!std::getline(stat, text) || !(uptime >> up)) return 0;
  // Fields after the command name (which may hold spaces, inside parentheses): the 22nd field is the start time in
  // ticks.
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  for (int i = 3; i < 22 && rest >> field;) ++i;
  double ticks = 0;
  if (!(rest >> ticks)) return 0;
  const long hz = ::sysconf(_SC_CLK_TCK);
  return hz > 0 ? std::max(0.0, up - ticks / static_cast<double>(hz)) : 0;
}

}  // namespace parallm
