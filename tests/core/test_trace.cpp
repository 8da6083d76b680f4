// Stack dumps: every thread of the process appears, named, with the function
// it is parked in; SIGUSR2 writes the file through the trace thread, and a
// direct dump() writes it too, whole (renamed into place).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/trace.h"

namespace fs = std::filesystem;

namespace {
std::atomic<bool> g_release{false};

// Not inlined and with external linkage, so the dump can name it.
__attribute__((noinline)) void parallm_test_parked_here(std::atomic<int>* started) {
  started->fetch_add(1);
  while (!g_release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Parked {
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  explicit Parked(int n) {
    g_release = false;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([this, i] {
        parallm::trace::set_thread_name("parked-" + std::to_string(i));
        parallm_test_parked_here(&started);
      });
    while (started.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Parked() {
    g_release = true;
    for (auto& t : threads) t.join();
  }
};
}  // namespace

TEST(Trace, CaptureShowsEveryThreadWhereItIs) {
  Parked parked(2);
  const std::string text = parallm::trace::capture_all("test");
  EXPECT_NE(text.find("parallm stack dump: test"), std::string::npos);
  EXPECT_NE(text.find("\"parked-0\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"parked-1\""), std::string::npos) << text;
  EXPECT_NE(text.find("(this thread, writing the dump)"), std::string::npos);
  if (std::string(parallm::trace::symbolizer()) == "libbacktrace") {
    // Both parked threads show the function they wait in.
    size_t hits = 0;
    for (size_t p = text.find("parallm_test_parked_here"); p != std::string::npos;
         p = text.find("parallm_test_parked_here", p + 1))
      ++hits;
    EXPECT_GE(hits, 2u) << text;
  }
}

TEST(Trace, Sigusr2WritesTheFile) {
  const fs::path path = fs::temp_directory_path() / ("parallm_trace_" + std::to_string(::getpid()) + ".txt");
  fs::remove(path);
  EXPECT_EQ(parallm::trace::dump("not installed"), "");
  parallm::trace::install(path.string());
  ASSERT_TRUE(parallm::trace::installed());
  Parked parked(1);
  std::raise(SIGUSR2);
  for (int i = 0; i < 5000 && !fs::exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(fs::exists(path));
  std::string text = slurp(path);
  EXPECT_NE(text.find("SIGUSR2 received"), std::string::npos) << text;
  EXPECT_NE(text.find("\"parked-0\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"parallm-trace\" (this thread"), std::string::npos) << text;
  // A direct dump replaces it whole.
  EXPECT_EQ(parallm::trace::dump("direct"), path.string());
  text = slurp(path);
  EXPECT_EQ(text.rfind("parallm stack dump: direct", 0), 0u);
  fs::remove(path);
}
