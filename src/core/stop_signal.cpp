#include "core/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace parallm::stop_signal {

namespace {

std::atomic<int> g_first{0};
std::atomic<int> g_count{0};

void say(const char* text) {
  const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)n;  // nothing to do about a closed stderr inside a handler
}

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  const bool first = g_first.compare_exchange_strong(none, sig);
  g_count.fetch_add(1);
  if (first)
    say(sig == SIGTERM ? "parallm: SIGTERM received: finishing the step, then saving and exiting\n"
                       : "parallm: SIGUSR1 received: finishing the step, then saving and exiting\n");
  else
    say("parallm: another stop signal received: the stop already under way goes on (a save is never cut short)\n");
}

}  // namespace

void install() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and writes go on rather than fail with EINTR
  ::sigaction(SIGUSR1, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

int first() {
  return g_first.load();
}

int count() {
  return g_count.load();
}

const char* name(int sig) {
  switch (sig) {
    case SIGUSR1:
      return "SIGUSR1";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "a stop signal";
  }
}

void reset() {
  g_first.store(0);
  g_count.store(0);
}

}  // namespace parallm::stop_signal
