#include "core/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/env.h"

namespace parallm::prof {

namespace {
struct Entry {
  std::string name;
  std::atomic<int64_t> ns{0}, calls{0};
};
constexpr int kMax = 128;
Entry g_entries[kMax];
std::atomic<int> g_count{0};
std::mutex g_mu;
std::atomic<bool> g_enabled{env::value(env::Var::Profile) != "0"};
}  // namespace

bool enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}
void set_enabled(bool on) {
  g_enabled = on;
}

int op_id(const char* name) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (int i = 0; i < g_count; ++i)
    if (g_entries[i].name == name) return i;
  int id = g_count;
  if (id >= kMax) return kMax - 1;
  g_entries[id].name = name;
  g_count = id + 1;
  return id;
}

void add(int id, int64_t ns) {
  g_entries[id].ns.fetch_add(ns, std::memory_order_relaxed);
  g_entries[id].calls.fetch_add(1, std::memory_order_relaxed);
}

void reset() {
  for (int i = 0; i < g_count; ++i) {
    g_entries[i].ns = 0;
    g_entries[i].calls = 0;
  }
}

std::vector<Row> rows() {
  std::vector<Row> r;
  for (int i = 0; i < g_count; ++i)
    if (g_entries[i].calls > 0)
      r.push_back({g_entries[i].name, g_entries[i].calls.load(), g_entries[i].ns.load() / 1e6});
  std::sort(r.begin(), r.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  return r;
}

std::string table() {
  auto r = rows();
  double total = 0;
  for (const auto& x : r) total += x.ms;
  std::string s = fmt::format("{:<28} {:>10} {:>12} {:>7}\n", "op", "calls", "ms", "share");
  for (const auto& x : r)
    s += fmt::format("{:<28} {:>10} {:>12.1f} {:>6.1f}%\n", x.name, x.calls, x.ms, total > 0 ? 100 * x.ms / total : 0);
  return s;
}

}  // namespace parallm::prof
