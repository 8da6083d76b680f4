// What the launcher told this process: its rank and how many tasks it was
// started with (mpirun, mpiexec, srun, PMIx, PMI, PALS, or RANK/WORLD_SIZE),
// the CPUs the scheduler gave it, and whether the world the backend made is
// the one the launcher started.
//
// Design: the environment is read through a lookup function so tests can
// feed any scheduler's variables. Each launcher's variables form a scheme;
// the first scheme that names a rank gives the rank, and the size too, or
// the next scheme that names one does (PMIx publishes no size: under srun it
// comes from SLURM_STEP_NUM_TASKS). The variables read are kept, so that a
// process which cannot join its tasks is stopped with an error naming them
// instead of training alone.
#pragma once
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace parallm::comm {

using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_env();  // std::getenv

// A rank's identity as the launcher published it (-1: not given).
struct EnvRank {
  int rank = -1, size = -1, local_rank = -1, local_size = -1;
  std::string source;  // "OMPI_COMM_WORLD", "PALS", "PMIX", "PMI", "SLURM", "RANK", or "" when none
  std::string seen;    // the variables rank and size came from: "SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2"
  // One of several tasks: a size above 1, or a rank above 0 whatever the size.
  bool several() const { return size > 1 || rank > 0; }
};
// Reads, in order: OMPI_COMM_WORLD_*, PALS_*, PMIX_*, PMI_* (MPI_LOCAL*), SLURM_* (a task of an srun
// step: SLURM_STEP_ID set, or SLURM_PROCID above 0; a batch script is SLURM_PROCID 0 without a step),
// then RANK/LOCAL_RANK/WORLD_SIZE. Malformed numbers are a ConfigError naming the variable.
EnvRank env_rank(const EnvLookup& env = process_env());

// Throws unless `world` is the job the launcher started: when this process is
// one of several tasks, the world must have their number of ranks. A
// ConfigError when `world` is the self backend (one rank asked for), else a
// CommError (the tasks could not find each other); both name the variables.
void check_joined(const Communicator& world, const EnvRank& er);

// Before MPI starts: a task of several that its launcher gave no PMI (no
// PMIX_RANK, PMI_RANK or PMI_FD: srun without --mpi) cannot join the others
// with Open MPI, whose MPI_Init then fails. The warning to print, naming the
// variables, or "" when there is a PMI or one task.
std::string missing_pmi_warning(const EnvLookup& env, const EnvRank& er);

// Threads for this rank, unless OMP_NUM_THREADS is set (then 0: keep it).
// Collective over `world` (`my_node`: this rank's node index): the CPUs of
// this rank's affinity mask split among the ranks on its node whose masks
// overlap it (unbound ranks share the node, bound ones keep their cores),
// and at most SLURM_CPUS_PER_TASK where the scheduler set it.
int default_threads(Communicator& world, int my_node, const EnvLookup& env = process_env());
// The pure part: my mask's CPU count, how many ranks share it, the scheduler's CPUs per task (-1: none).
int threads_for(int my_cpus, int sharing_ranks, int cpus_per_task);

}  // namespace parallm::comm
