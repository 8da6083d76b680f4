// `parallm launch [-n N] [--ppn P] [--hostfile F] [--dry-run] -- command ...`
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/launch.h"
#include "cli/launch_retry.h"
#include "cli/options.h"
#include "comm/communicator.h"
#include "comm/topology.h"
#include "core/error.h"
#include "core/fileio.h"

namespace parallm::cli {

namespace {

bool on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string dirs(path);
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    if (access((dir + "/" + prog).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// `srun --mpi=list` (stdout and stderr: older Slurm prints it as "srun: ..." lines on stderr).
std::string srun_mpi_list() {
  FILE* f = popen("srun --mpi=list 2>&1", "r");
  if (!f) return "";
  std::string text;
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  return pclose(f) == 0 ? text : "";
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "parallm";
}

}  // namespace

Runner add_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand("launch", "Run a command on N ranks with the launcher this site uses");
  auto req = std::make_shared<LaunchRequest>();
  auto dry = std::make_shared<bool>(false);
  auto ro = std::make_shared<RestartOptions>();
  cmd->add_option("-n,--np", req->n, "Ranks in all (default: nodes x ranks per node)")->check(int_in(1, kMaxRanks));
  cmd->add_option("--ppn", req->ppn, "Ranks per node (default: 1, or -n spread over the nodes)")
      ->check(int_in(1, kMaxRanks));
  cmd->add_option("--hostfile", req->hostfile, "Hosts to run on (Open MPI, MPICH or PBS node file format)");
  cmd->add_option("--launcher", req->launcher, "auto, openmpi, mpich, pals, srun or direct")->capture_default_str();
  cmd->add_option("--mpi-arg", req->extra, "Extra argument for the launcher (repeat for several)")
      ->allow_extra_args(false);
  cmd->add_flag("--dry-run", *dry, "Print the command, do not run it");
  cmd->add_option("--restarts", ro->restarts,
                  "Run a failed job again up to N times from its last checkpoint (parallm train: "
                  "train.init_from=auto), leaving out a host the failure names")
      ->check(int_in(0, 1000));
  cmd->add_option("--backoff", ro->backoff_s, "Seconds before the first restart, doubled each time (at most 600)")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("--linger", ro->linger_s,
                  "With --restarts: seconds a failed attempt's launcher may run on after the job reported its "
                  "failure before it is stopped (mpirun may wait for a lost host); 0: wait for it")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  // Everything from the first word that is not an option of launch (or after --) is the command.
  cmd->add_option("command", req->command, "The command (write it after --)");
  cmd->positionals_at_end();
  cmd->footer(
      "Detects Slurm (srun, with the PMI plugin this MPI needs from srun --mpi=list), PBS (mpiexec with\n"
      "$PBS_NODEFILE), a hostfile, or this host alone, and sets OMP_NUM_THREADS to the cores per rank unless\n"
      "it is set. Example: parallm launch -n 2 -- parallm train");
  return [req, dry, ro]() {
    // "parallm" means this very program, wherever it was built.
    if (!req->command.empty() && req->command.front() == "parallm") req->command.front() = self_exe();
    Machine m;
    const char* pbs = std::getenv("PBS_JOBID");
    m.flavor = flavor_from_library(comm::mpi_library_version(), pbs != nullptr);
    m.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    m.root = geteuid() == 0;
    m.on_path = on_path;
    m.read_file = [](const std::string& path) { return read_text_file(path, "launch"); };
    m.srun_mpi_list = srun_mpi_list;
    if (ro->restarts > 0 && !*dry) {
      ro->self_host = comm::this_host();
      return run_with_restarts(*req, *ro, [&](const LaunchRequest& r) {
        LaunchRequest q = r;
        if (!q.exclude.empty() && !q.hostfile.empty()) {  // the hosts left: a hostfile of their own
          q.hostfile = (std::filesystem::temp_directory_path() /
                        fmt::format("parallm-launch-{}-{}.hosts", getpid(), q.exclude.size()))
                           .string();
          const std::string text = hostfile_without(read_text_file(r.hostfile, "launch"), q.exclude);
          write_file(q.hostfile, {{text.data(), text.size()}});
        }
        const LaunchPlan p = plan_launch(q, comm::process_env(), m);
        std::printf("launch: %s\n", p.why.c_str());
        return p;
      });
    }
    const LaunchPlan p = plan_launch(*req, comm::process_env(), m);
    std::printf("launch: %s\n", p.why.c_str());
    for (const auto& [k, v] : p.env) std::printf("launch: %s=%s\n", k.c_str(), v.c_str());
    std::printf("launch: %s\n", shell_join(p.argv).c_str());
    std::fflush(stdout);
    if (*dry) return 0;
    for (const auto& [k, v] : p.env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : p.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    throw IoError("launch", fmt::format("could not start {}: {}", p.argv[0], std::strerror(errno)));
  };
}

}  // namespace parallm::cli
