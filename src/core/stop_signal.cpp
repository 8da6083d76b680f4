#include "core/stop_signal.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

namespace parallm::stop_signal {

namespace {

std::atomic<int> g_first{0};
std::atomic<int> g_count{0};
std::atomic<bool> g_ending{false};  // this rank is ending the job after its own error

void say(const char* text) {
  const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)n;  // nothing to do about a closed stderr
}

// What a stop signal says (string literals: one write(2) a line). Nothing
// promises a save: a launcher aborting the job after another rank's error
// sends the same SIGTERM, and ends the job before any save.
#define PARALLM_STOP_ASK                                                                                 \
  ": asking every rank to stop after the step under way; once they agree, rank 0 logs the stop and the " \
  "checkpoint is saved (a job being aborted after an error ends first, with nothing saved)\n"
#define PARALLM_STOP_AGAIN " again: the stop already asked for goes on (a save under way is not cut short)\n"
#define PARALLM_STOP_ENDING " while this rank ends the job after its error: nothing is saved\n"

// Async-signal-safe: atomics and write(2) only (also runs inside the handler).
void received(int sig) {
  int none = 0;
  const bool first = g_first.compare_exchange_strong(none, sig);
  const bool term = sig == SIGTERM;
  if (g_ending.load())
    say(term ? "parallm: SIGTERM received" PARALLM_STOP_ENDING : "parallm: SIGUSR1 received" PARALLM_STOP_ENDING);
  else if (first)
    say(term ? "parallm: SIGTERM received" PARALLM_STOP_ASK : "parallm: SIGUSR1 received" PARALLM_STOP_ASK);
  else
    say(term ? "parallm: SIGTERM received" PARALLM_STOP_AGAIN : "parallm: SIGUSR1 received" PARALLM_STOP_AGAIN);
  g_count.fetch_add(1);  // after the line: whoever waits for the count finds it written
}

extern "C" void on_stop_signal(int sig) {
  received(sig);
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  return set;
}

void signal_thread_main() {
  ::pthread_setname_np(::pthread_self(), "parallm-signals");
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (::sigwait(&set, &sig) == 0) received(sig);
  }
}

}  // namespace

void install() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and writes go on rather than fail with EINTR
  ::sigaction(SIGUSR1, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  const sigset_t set = stop_set();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  static std::once_flag started;
  std::call_once(started, [] { std::thread(signal_thread_main).detach(); });
}

Unblocked::Unblocked() {
  sigset_t old;
  const sigset_t set = stop_set();
  ::pthread_sigmask(SIG_UNBLOCK, &set, &old);
  was_blocked_[0] = sigismember(&old, SIGUSR1) == 1;
  was_blocked_[1] = sigismember(&old, SIGTERM) == 1;
}

Unblocked::~Unblocked() {
  sigset_t set;
  sigemptyset(&set);
  if (was_blocked_[0]) sigaddset(&set, SIGUSR1);
  if (was_blocked_[1]) sigaddset(&set, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
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

void ending_on_error() {
  g_ending.store(true);
}

void reset() {
  g_first.store(0);
  g_count.store(0);
  g_ending.store(false);
}

}  // namespace parallm::stop_signal
