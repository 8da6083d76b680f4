#include "core/trace.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#ifdef PARALLM_HAVE_LIBBACKTRACE
#include <backtrace.h>
#endif

namespace parallm::trace {

namespace {

constexpr int kMaxFrames = 64;
constexpr int kMaxThreads = 1024;

// One slot per thread of a capture. Static, never freed: a handler that runs
// late still writes into valid memory.
struct Slot {
  std::atomic<pid_t> tid{0};
  std::atomic<int> n{-1};  // frames recorded; -1 while waiting
  void* frames[kMaxFrames];
};
Slot g_slots[kMaxThreads];
std::atomic<int> g_armed{0};
int g_pipe[2] = {-1, -1};

pid_t this_tid() {
  return static_cast<pid_t>(::syscall(SYS_gettid));
}
int capture_signal() {
  return SIGRTMIN + 4;
}

extern "C" void on_capture(int, siginfo_t*, void*) {
  const int saved = errno;
  const pid_t me = this_tid();
  const int n = g_armed.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (g_slots[i].tid.load(std::memory_order_acquire) == me) {
      g_slots[i].n.store(::backtrace(g_slots[i].frames, kMaxFrames), std::memory_order_release);
      break;
    }
  errno = saved;
}

extern "C" void on_usr2(int) {
  const int saved = errno;
  const char c = 'u';
  [[maybe_unused]] const ssize_t r = ::write(g_pipe[1], &c, 1);
  errno = saved;
}

struct State {
  std::mutex capture_mu;  // one capture at a time
  std::mutex path_mu;
  std::string path;
  bool installed = false;
  std::once_flag capture_ready, thread_started;
#ifdef PARALLM_HAVE_LIBBACKTRACE
  backtrace_state* bt = nullptr;
#endif
};
State& state() {
  static State* s = new State;  // never destroyed: a dump may run while the process exits
  return *s;
}

#ifdef PARALLM_HAVE_LIBBACKTRACE
extern "C" void bt_error(void*, const char*, int) {}  // unknown frames stay unnamed
#endif

void ensure_capture_handler() {
  std::call_once(state().capture_ready, [] {
    void* prime[2];
    ::backtrace(prime, 2);  // loads the unwinder now, not inside a signal handler
    struct sigaction sa {};
    sa.sa_sigaction = on_capture;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(capture_signal(), &sa, nullptr);
#ifdef PARALLM_HAVE_LIBBACKTRACE
    state().bt = backtrace_create_state(nullptr, /*threaded=*/1, bt_error, nullptr);
#endif
  });
}

std::string demangle(const char* name) {
  if (!name) return {};
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

struct Where {
  std::string function, file;
  int line = 0;
};
// One address: the innermost function first, then those it was inlined into.
using Wheres = std::vector<Where>;

#ifdef PARALLM_HAVE_LIBBACKTRACE
extern "C" int on_pcinfo(void* data, uintptr_t, const char* file, int line, const char* function) {
  if (function) static_cast<Wheres*>(data)->push_back({demangle(function), file ? file : "", line});
  return 0;
}
extern "C" void on_syminfo(void* data, uintptr_t, const char* symname, uintptr_t, uintptr_t) {
  if (symname) static_cast<Wheres*>(data)->push_back({demangle(symname), "", 0});
}
#endif

std::string describe(void* addr, bool return_address) {
  // A return address points after the call: look up the call itself.
  const auto pc = reinterpret_cast<uintptr_t>(addr) - (return_address ? 1 : 0);
  Wheres ws;
#ifdef PARALLM_HAVE_LIBBACKTRACE
  if (state().bt) {
    backtrace_pcinfo(state().bt, pc, on_pcinfo, bt_error, &ws);
    if (ws.empty()) backtrace_syminfo(state().bt, pc, on_syminfo, bt_error, &ws);
  }
#endif
  Dl_info info{};
  const bool have_dl = ::dladdr(reinterpret_cast<void*>(pc), &info) != 0;
  if (ws.empty() && have_dl && info.dli_sname) ws.push_back({demangle(info.dli_sname), "", 0});
  std::string out = fmt::format("{} in {}", addr, ws.empty() ? "??" : ws[0].function);
  for (size_t i = 0; i < ws.size(); ++i) {
    if (i > 0) out += ", inlined in " + ws[i].function;
    if (!ws[i].file.empty()) out += fmt::format(" at {}:{}", ws[i].file, ws[i].line);
  }
  if (have_dl && info.dli_fname) {
    const char* base = std::strrchr(info.dli_fname, '/');
    out += fmt::format(" [{}]", base ? base + 1 : info.dli_fname);
  }
  return out;
}

std::string thread_name(pid_t tid) {
  std::ifstream f(fmt::format("/proc/self/task/{}/comm", tid));
  std::string name;
  std::getline(f, name);
  return name;
}

std::vector<pid_t> list_threads() {
  std::vector<pid_t> tids;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    ::closedir(d);
  }
  return tids;
}

std::string format_stack(void* const* frames, int n, bool from_handler) {
  // In a handler's capture, frames up to the signal trampoline are the handler's
  // own: on_capture, then the trampoline (__restore_rt, not always named).
  int first = 0;
  if (from_handler) {
    first = std::min(n, 2);
    for (int i = 0; i < n; ++i) {
      Dl_info info{};
      if (::dladdr(frames[i], &info) && info.dli_sname && std::strcmp(info.dli_sname, "__restore_rt") == 0) {
        first = i + 1;
        break;
      }
    }
  }
  std::string out;
  for (int i = first; i < n; ++i) out += fmt::format("  #{:<2} {}\n", i - first, describe(frames[i], i > first));
  return out;
}

void trace_thread_main() {
  set_thread_name("parallm-trace");
  for (;;) {
    char c = 0;
    const ssize_t r = ::read(g_pipe[0], &c, 1);
    if (r == 1) {
      dump("SIGUSR2 received");
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      return;
    }
  }
}

}  // namespace

const char* symbolizer() {
#ifdef PARALLM_HAVE_LIBBACKTRACE
  return "libbacktrace";
#else
  return "dladdr";
#endif
}

void set_thread_name(const std::string& name) {
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

std::string capture_all(const std::string& reason) {
  ensure_capture_handler();
  std::lock_guard<std::mutex> lock(state().capture_mu);
  const pid_t self = this_tid();
  std::vector<pid_t> tids = list_threads();
  if (tids.size() > static_cast<size_t>(kMaxThreads)) tids.resize(kMaxThreads);
  const int count = static_cast<int>(tids.size());
  for (int i = 0; i < count; ++i) {
    g_slots[i].n.store(-1, std::memory_order_relaxed);
    g_slots[i].tid.store(tids[i] == self ? 0 : tids[i], std::memory_order_release);
  }
  g_armed.store(count, std::memory_order_release);
  for (int i = 0; i < count; ++i)
    if (tids[i] != self && ::syscall(SYS_tgkill, ::getpid(), tids[i], capture_signal()) != 0)
      g_slots[i].n.store(-2, std::memory_order_release);  // the thread has exited meanwhile
  void* own[kMaxFrames];
  const int own_n = ::backtrace(own, kMaxFrames);
  // Every thread gets a second to answer (one blocking signals never does).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (int i = 0; i < count; ++i)
    while (tids[i] != self && g_slots[i].n.load(std::memory_order_acquire) == -1 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<std::vector<void*>> stacks(count);
  std::vector<int> answer(count);
  for (int i = 0; i < count; ++i) {
    answer[i] = g_slots[i].n.load(std::memory_order_acquire);
    if (answer[i] > 0) stacks[i].assign(g_slots[i].frames, g_slots[i].frames + answer[i]);
    g_slots[i].tid.store(0, std::memory_order_release);
  }
  g_armed.store(0, std::memory_order_release);

  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  std::string out = fmt::format("parallm stack dump: {}\nprocess {} on {} at {}, {} threads (symbols: {})\n", reason,
                                ::getpid(), host, when, count, symbolizer());
  for (int i = 0; i < count; ++i) {
    const bool me = tids[i] == self;
    out += fmt::format("\nthread {} \"{}\"{}\n", tids[i], thread_name(tids[i]),
                       me ? " (this thread, writing the dump)" : "");
    if (me)
      out += format_stack(own, own_n, false);
    else if (answer[i] > 0)
      out += format_stack(stacks[i].data(), answer[i], true);
    else
      out += answer[i] == -2 ? "  (exited)\n" : "  (no answer within 1 s: the thread blocks signals)\n";
  }
  return out;
}

void install(const std::string& path) {
  ensure_capture_handler();
  {
    std::lock_guard<std::mutex> lock(state().path_mu);
    state().path = path;
    state().installed = true;
  }
  std::call_once(state().thread_started, [] {
    if (::pipe(g_pipe) != 0) return;
    struct sigaction sa {};
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGUSR2, &sa, nullptr);
    std::thread(trace_thread_main).detach();
  });
}

bool installed() {
  std::lock_guard<std::mutex> lock(state().path_mu);
  return state().installed;
}

std::string dump(const std::string& reason) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(state().path_mu);
    if (!state().installed) return {};
    path = state().path;
  }
  const std::string text = capture_all(reason);
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.good()) return {};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return {};
  }
  std::fprintf(stderr, "parallm: stacks of every thread written to %s (%s)\n", path.c_str(), reason.c_str());
  std::fflush(stderr);
  return path;
}

std::string dump_once(const std::string& reason) {
  static std::mutex mu;
  static bool done = false;
  static std::string path;
  std::lock_guard<std::mutex> lock(mu);
  if (!done && installed()) {
    done = true;
    path = dump(reason);
  }
  return path;
}

}  // namespace parallm::trace
