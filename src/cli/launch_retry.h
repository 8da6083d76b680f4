// `parallm launch --restarts N`: a job that fails is run again, up to N more
// times, from its last intact checkpoint (a `parallm train` command is rerun
// with train.init_from=auto: it resumes where a checkpoint exists, else starts
// over), after a back-off that doubles each time. Each attempt's output passes
// through line by line; the lines that say why it ended (parallm's errors,
// Open MPI's and Slurm's reports of a lost rank) are kept, and the host those
// reports name is left out of the next attempt (srun --exclude under Slurm,
// dropped from a hostfile) when enough remain. A job that fails N + 1 times
// ends with every attempt's cause listed, and the last attempt's exit status.
#pragma once
#include <string>
#include <vector>

#include "cli/launch.h"

namespace parallm::cli {

// One line of a job's output: whether it says why the job ended, and the host it names as failed ("" if none).
// Open MPI: "mpirun noticed that process rank 1 with PID 42 on node b exited on signal 9 (Killed).";
// Slurm: "srun: error: b: task 1: Killed"; parallm: "error: ..." (a peer it lost: "... on host b ..."); Open MPI's
// report of a peer that disconnected: "  Peer host:  b".
bool is_failure_report(const std::string& line);
std::string failed_host(const std::string& line);
// How surely the host a line names is the failed one (0: it names none): 3 for parallm's "rank R on host H did not
// answer", 2 for a launcher's report of a rank killed or lost, 1 for srun's "H: task R: Exited with exit code N" (a
// rank that ended itself, on a healthy host). An attempt's failed host is the first one of the highest weight.
int failed_host_weight(const std::string& line);
// The failed host of an attempt from its report lines, in order: the host of the weightiest kind of report; among
// parallm's "did not answer" reports, the host named by the most distinct reporting hosts ("[host:rank] error: ..."),
// then the first named (a partition seen from both sides names each side once).
class FailedHost {
 public:
  void add(const std::string& line);
  const std::string& host() const { return host_; }

 private:
  struct Named {
    std::string host;
    std::vector<std::string> reporters;
  };
  std::vector<Named> named_;  // weight-3 reports, in order of first mention
  std::string host_;
  int weight_ = 0;
};

// The command a restart runs: a `parallm train` command (argv[1] == "train") with train.init_from=auto appended
// (the last value of a key wins); any other command as it is.
std::vector<std::string> restart_command(const std::vector<std::string>& command);

struct AttemptEnd {
  int status = 0;                    // the exit status; 128 + the signal for a killed launcher
  std::string how;                   // "exit status 1", "killed by signal 9 (Killed)"
  std::vector<std::string> reports;  // the last few lines saying why
  std::string host;                  // the failed host they name (failed_host_weight; "" if none)
};

// Runs argv with `env` set, passing its stdout and stderr through, and says how it ended. A launcher still running
// `linger_s` after the first line reporting a failure (mpirun waiting for a lost host's daemon) is stopped (SIGTERM,
// then SIGKILL 5 s later); <= 0: never.
AttemptEnd run_attempt(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& env, double linger_s = 0);

struct RestartOptions {
  int restarts = 0;
  double backoff_s = 10;  // before the first restart; doubled each time, at most 600 s
  double linger_s = 30;   // a failed attempt's launcher is stopped this long after the first failure report
  std::string self_host;  // this host: never excluded (local runs)
};
// Plans and runs `req` up to 1 + restarts times (plan(req) for each, with the hosts left out so far); returns
// the exit status to end with.
int run_with_restarts(LaunchRequest req, const RestartOptions& o,
                      const std::function<LaunchPlan(const LaunchRequest&)>& plan);

}  // namespace parallm::cli
