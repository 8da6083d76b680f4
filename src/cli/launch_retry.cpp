// `parallm launch --restarts N` (launch_retry.h): attempts, their causes and
// the hosts they name; the process handling is POSIX (fork, exec, poll).
#include "cli/launch_retry.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"

namespace parallm::cli {

namespace {
// The word after `marker` in `line`, up to a space, ':' or '.' at the end ("" if the marker is absent).
std::string word_after(const std::string& line, const std::string& marker) {
  const size_t at = line.find(marker);
  if (at == std::string::npos) return "";
  const size_t b = at + marker.size();
  size_t e = line.find_first_of(" :,)", b);
  if (e == std::string::npos) e = line.size();
  std::string w = line.substr(b, e - b);
  while (!w.empty() && w.back() == '.') w.pop_back();
  return w;
}
}  // namespace

// Open MPI's "An MPI communication peer process has unexpectedly disconnected" names the lost peer's host on a
// line of its own: "  Peer host:  b".
bool is_peer_host_line(const std::string& line) {
  const size_t b = line.find_first_not_of(' ');
  return b != std::string::npos && line.compare(b, 10, "Peer host:") == 0;
}

bool is_failure_report(const std::string& line) {
  return line.rfind("error:", 0) == 0 || line.find("] error:") != std::string::npos ||
         line.find("noticed that process rank") != std::string::npos || line.rfind("srun: error:", 0) == 0 ||
         is_peer_host_line(line);
}

std::string failed_host(const std::string& line) {
  if (is_peer_host_line(line)) {
    const std::string rest = line.substr(line.find("Peer host:") + 10);
    const size_t b = rest.find_first_not_of(' ');
    return b == std::string::npos ? "" : rest.substr(b, rest.find_first_of(" \t", b) - b);
  }
  if (line.find("noticed that process rank") != std::string::npos) return word_after(line, " on node ");
  if (line.rfind("srun: error: ", 0) == 0 && line.find(": task") != std::string::npos)
    return word_after(line, "srun: error: ");
  if (is_failure_report(line)) return word_after(line, " on host ");
  return "";
}

int failed_host_weight(const std::string& line) {
  if (failed_host(line).empty()) return 0;
  if (line.find(" did not answer") != std::string::npos) return 3;        // parallm: the peer it lost
  if (line.find("Exited with exit code") != std::string::npos) return 1;  // srun: a rank that ended itself
  return 2;                                                               // killed, lost
}

void FailedHost::add(const std::string& line) {
  const std::string h = failed_host(line);
  const int w = failed_host_weight(line);
  if (h.empty() || w < weight_) return;
  if (w > weight_) {
    weight_ = w;
    host_ = h;
  }
  if (w < 3) return;
  // "[reporter:rank] error: ..." names who reports.
  const size_t colon = line.rfind(':', line.find(']'));
  const std::string reporter = line[0] == '[' && colon != std::string::npos ? line.substr(1, colon - 1) : line;
  auto it = std::find_if(named_.begin(), named_.end(), [&](const Named& n) { return n.host == h; });
  if (it == named_.end()) it = named_.insert(named_.end(), Named{h, {}});
  if (std::find(it->reporters.begin(), it->reporters.end(), reporter) == it->reporters.end())
    it->reporters.push_back(reporter);
  const Named* best = &named_.front();
  for (const Named& n : named_)
    if (n.reporters.size() > best->reporters.size()) best = &n;
  host_ = best->host;
}

std::vector<std::string> restart_command(const std::vector<std::string>& command) {
  std::vector<std::string> c = command;
  if (c.size() >= 2 && c[1] == "train") c.push_back("train.init_from=auto");
  return c;
}

namespace {
// Every process below `pid` (children first found through /proc/<pid>/task/<tid>/children).
std::vector<pid_t> descendants(pid_t pid) {
  std::vector<pid_t> out, todo = {pid};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", p), ec)) {
      std::ifstream f(t.path() / "children");
      for (pid_t c; f >> c;) {
        out.push_back(c);
        todo.push_back(c);
      }
    }
  }
  return out;
}

// Stops a launcher that outlives its job's failure report by `linger_s`: SIGTERM, then SIGKILL 5 s later; says when
// to stop reading its output (the ranks it leaves may hold the pipes). Called after each poll.
class Linger {
 public:
  Linger(pid_t pid, double linger_s) : pid_(pid), linger_s_(linger_s) {}
  // false once the output is no longer worth waiting for.
  bool tend(bool reported) {
    if (linger_s_ <= 0 || !reported) return true;
    const auto now = Clock::now();
    if (!seen_) {
      seen_ = true;
      since_ = now;
    }
    const double s = std::chrono::duration<double>(now - since_).count();
    if (s > linger_s_ && !termed_) {
      std::fprintf(stderr,
                   "launch: the launcher was still running %.0f s after the job reported its failure: stopping it\n",
                   linger_s_);
      kill(pid_, SIGTERM);
      termed_ = true;
    }
    if (s > linger_s_ + 5 && !killed_) {
      for (pid_t d : descendants(pid_)) kill(d, SIGKILL);  // the ranks it started here, which it no longer ends
      kill(pid_, SIGKILL);
      killed_ = true;
    }
    return s <= linger_s_ + 7;
  }

 private:
  using Clock = std::chrono::steady_clock;
  pid_t pid_;
  double linger_s_;
  Clock::time_point since_{};
  bool seen_ = false, termed_ = false, killed_ = false;
};
}  // namespace

AttemptEnd run_attempt(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& env, double linger_s) {
  int out[2], err[2];
  PARALLM_CHECK(pipe(out) == 0 && pipe(err) == 0, IoError, "launch", "pipe: {}", std::strerror(errno));
  const pid_t pid = fork();
  PARALLM_CHECK(pid >= 0, IoError, "launch", "fork: {}", std::strerror(errno));
  if (pid == 0) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(out[0]);
    close(err[0]);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    std::fprintf(stderr, "error: launch could not start %s: %s\n", a[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  AttemptEnd end;
  std::string pending[2];
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  FailedHost failed;
  auto take = [&](const std::string& line) {
    if (!is_failure_report(line)) return;
    end.reports.push_back(line);
    if (end.reports.size() > 4) end.reports.erase(end.reports.begin());
    failed.add(line);
    end.host = failed.host();
  };
  Linger linger(pid, linger_s);
  while (open > 0 && linger.tend(!end.reports.empty())) {
    if (poll(fds, 2, 200) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open;
        continue;
      }
      std::fwrite(buf, 1, static_cast<size_t>(n), i == 0 ? stdout : stderr);
      std::fflush(i == 0 ? stdout : stderr);
      pending[i].append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = pending[i].find('\n')) != std::string::npos; pending[i].erase(0, nl + 1))
        take(pending[i].substr(0, nl));
    }
  }
  for (const auto& rest : pending)
    if (!rest.empty()) take(rest);
  for (pollfd& f : fds)
    if (f.fd >= 0) close(f.fd);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(st)) {
    end.status = 128 + WTERMSIG(st);
    end.how = fmt::format("killed by signal {} ({})", WTERMSIG(st), strsignal(WTERMSIG(st)));
  } else {
    end.status = WEXITSTATUS(st);
    end.how = fmt::format("exit status {}", end.status);
  }
  return end;
}

int run_with_restarts(LaunchRequest req, const RestartOptions& o,
                      const std::function<LaunchPlan(const LaunchRequest&)>& plan) {
  std::vector<std::string> causes;
  const std::vector<std::string> first = req.command;
  int status = 1;
  for (int attempt = 0; attempt <= o.restarts; ++attempt) {
    if (attempt > 0) {
      req.command = restart_command(first);
      req.restart = true;
    }
    LaunchPlan p;
    try {
      p = plan(req);
    } catch (const Error& e) {  // e.g. too few hosts left once the failed ones are out
      causes.push_back(fmt::format("attempt {} could not be planned: {}", attempt + 1, e.message()));
      break;
    }
    std::printf("launch: attempt %d of %d: %s\n", attempt + 1, o.restarts + 1, shell_join(p.argv).c_str());
    std::fflush(stdout);
    const AttemptEnd end = run_attempt(p.argv, p.env, o.linger_s);
    status = end.status;
    if (end.status == 0) {
      if (attempt > 0) std::printf("launch: attempt %d of %d succeeded\n", attempt + 1, o.restarts + 1);
      return 0;
    }
    std::string why = end.how;
    for (const auto& r : end.reports) why += "; " + r;
    causes.push_back(fmt::format("attempt {}: {}", attempt + 1, why));
    const bool drop = !end.host.empty() && end.host != o.self_host &&
                      std::find(req.exclude.begin(), req.exclude.end(), end.host) == req.exclude.end();
    if (drop) req.exclude.push_back(end.host);
    if (attempt == o.restarts) break;
    const double wait = std::min(600.0, o.backoff_s * static_cast<double>(1 << std::min(attempt, 20)));
    std::fprintf(stderr, "launch: attempt %d of %d ended (%s)%s; restarting from the last checkpoint in %.0f s\n",
                 attempt + 1, o.restarts + 1, why.c_str(),
                 drop ? fmt::format("; leaving out host {}", end.host).c_str() : "", wait);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  std::string all;
  for (const auto& c : causes) all += "\n  " + c;
  std::fprintf(stderr, "error: launch: the job failed %zu time%s:%s\n", causes.size(), causes.size() == 1 ? "" : "s",
               all.c_str());
  return status == 0 ? 1 : status;
}

}  // namespace parallm::cli
