#include "core/threads.h"

#include <omp.h>

#include "core/host.h"

namespace parallm {
int num_threads() {
  return omp_get_max_threads();
}
void set_num_threads(int n) {
  // The callers check their option first, naming it; this keeps libgomp from
  // being asked for thousands of threads (it crashes) whatever the caller.
  if (n > 0) check_thread_count(n, "threads", "the thread count");
  if (n > 0) omp_set_num_threads(n);
}
}  // namespace parallm
