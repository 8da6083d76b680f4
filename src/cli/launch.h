// `parallm launch`: turns "run this on N ranks" into the command the site's
// launcher understands (srun under Slurm, PALS mpiexec under PBS, Open MPI's
// mpirun or MPICH's mpiexec elsewhere), with a thread count per rank that
// fills the cores without oversubscribing them.
//
// Design: planning is a pure function of the request, the environment (a
// lookup, so tests can play any scheduler) and facts about the machine (MPI
// flavour, cores, which programs exist). The subcommand prints the plan and
// execs it without a shell; arguments are quoted only for display.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/topology.h"

namespace parallm::cli {

enum class MpiFlavor { OpenMpi, Mpich, Pals, None };
const char* flavor_name(MpiFlavor f);
// From MPI_Get_library_version's text ("" when built without MPI). A Cray
// MPICH inside a PBS job means PALS's mpiexec.
MpiFlavor flavor_from_library(const std::string& version, bool in_pbs);

struct LaunchRequest {
  int n = -1, ppn = -1;  // -1: from the environment
  std::string hostfile;
  std::string launcher = "auto";   // auto | openmpi | mpich | pals | srun | direct
  std::vector<std::string> extra;  // more launcher arguments, placed before the command
  std::vector<std::string> command;
  // Hosts a restart leaves out (launch_retry.h): srun --exclude under Slurm, dropped from a hostfile.
  std::vector<std::string> exclude;
  // A restart: under Slurm its step may share CPUs with the failed step (srun --overlap), which Slurm holds until
  // it hears from every node of it, a lost one included.
  bool restart = false;
};

struct Machine {
  MpiFlavor flavor = MpiFlavor::None;  // the MPI parallm was built with
  int cores = 1;                       // on this host (taken as every host's)
  bool root = false;
  std::function<bool(const std::string&)> on_path;           // is this program on PATH?
  std::function<std::string(const std::string&)> read_file;  // hostfile contents (IoError if unreadable)
  std::function<std::string()> srun_mpi_list;                // `srun --mpi=list`'s output ("" if it failed)
};

struct LaunchPlan {
  std::string mode;  // slurm | pbs | hostfile | local | direct | inside
  std::string why;   // one line: what was detected
  int ranks = 1, nodes = 1, ppn = 1, threads = 1;
  std::vector<std::pair<std::string, std::string>> env;  // set before exec
  std::vector<std::string> argv;                         // what to exec
};

struct Hostfile {
  std::vector<std::string> hosts;  // distinct, in order
  std::vector<int> slots;          // per host: slots=, host:N, or the number of lines naming it
};
// Accepts Open MPI ("host slots=N"), MPICH ("host:N") and PBS node files
// (one line per slot); '#' starts a comment. Errors name the file and line.
Hostfile parse_hostfile(const std::string& text, const std::string& path);
// The hostfile's text without the lines naming `hosts` (comments and blank lines kept).
std::string hostfile_without(const std::string& text, const std::vector<std::string>& hosts);

// The PMI plugins in `srun --mpi=list`'s output (Slurm 20-24 formats: one
// per line, "srun: " prefixed in older ones, "versions available: pmix_v4").
std::vector<std::string> parse_srun_mpi_list(const std::string& text);
// The plugin srun must start ranks of this MPI with, among those offered:
// pmix (then pmi2) for Open MPI, pmi2 (then pmix) for MPICH, cray_shasta
// (then pmi2) for PALS; "" when none fits (srun's MpiDefault then applies).
std::string pick_srun_mpi(MpiFlavor flavor, const std::vector<std::string>& offered);

LaunchPlan plan_launch(const LaunchRequest& req, const comm::EnvLookup& env, const Machine& m);

// For display only: POSIX-shell quoting where needed ('it'\''s').
std::string shell_quote(const std::string& s);
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace parallm::cli
