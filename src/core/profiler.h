// Opt-in wall-clock profile per operation (PARALLM_PROFILE=1 in the
// environment). Scopes cost two clock reads when enabled and one branch when
// not. The trainer prints the table at the end of a run; benchmarks use it to
// see where a step goes.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace parallm::prof {

bool enabled();
void set_enabled(bool on);
int op_id(const char* name);  // stable id per name (call once, cache in a static)
void add(int id, int64_t ns);
void reset();
struct Row {
  std::string name;
  int64_t calls;
  double ms;
};
std::vector<Row> rows();  // sorted by time, descending
std::string table();      // formatted rows with share of the total

class Scope {
 public:
  explicit Scope(int id) : id_(enabled() ? id : -1) {
    if (id_ >= 0) t0_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (id_ >= 0)
      add(id_, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
  }

 private:
  int id_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace parallm::prof

#define PARALLM_PROF_CAT2(a, b) a##b
#define PARALLM_PROF_CAT(a, b) PARALLM_PROF_CAT2(a, b)
#define PARALLM_PROFILE(name)                                                           \
  static const int PARALLM_PROF_CAT(prof_id_, __LINE__) = ::parallm::prof::op_id(name); \
  ::parallm::prof::Scope PARALLM_PROF_CAT(prof_scope_, __LINE__)(PARALLM_PROF_CAT(prof_id_, __LINE__))
