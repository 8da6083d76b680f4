#include "comm/launch_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/host.h"

namespace parallm::comm {

EnvLookup process_env() {
  return [](const char* k) -> const char* { return std::getenv(k); };
}

namespace {

// -1 when unset; a ConfigError when set but not a non-negative integer.
int env_int(const EnvLookup& env, const char* name) {
  const char* v = name ? env(name) : nullptr;
  if (!v || !*v) return -1;
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  PARALLM_CHECK(errno == 0 && *end == '\0' && x >= 0 && x < (1L << 30), ConfigError, "comm.env",
                "{}=\"{}\" is not a rank number", name, v);
  return static_cast<int>(x);
}

struct Scheme {
  const char* source;
  const char *rank, *size, *size_alt, *local_rank, *local_size;
  const char* step;  // trusted at rank 0 only when this one is set too (nullptr: always)
};

// SLURM_PROCID is also set in a batch script (rank 0 of nothing); only a task
// of a step started by srun has SLURM_STEP_ID with it. Inside a step,
// SLURM_STEP_NUM_TASKS is the step's size (SLURM_NTASKS may be the job's).
// PMIx names no size: the next scheme's is taken.
constexpr Scheme kSchemes[] = {
    {"OMPI_COMM_WORLD", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nullptr, "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr},
    {"PALS", "PALS_RANKID", "PMI_SIZE", nullptr, "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE", nullptr},
    {"PMIX", "PMIX_RANK", nullptr, nullptr, "PMIX_LOCAL_RANK", nullptr, nullptr},
    {"PMI", "PMI_RANK", "PMI_SIZE", nullptr, "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr},
    {"SLURM", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
     "SLURM_STEP_ID"},
    {"RANK", "RANK", "WORLD_SIZE", nullptr, "LOCAL_RANK", "LOCAL_WORLD_SIZE", nullptr},
};

// One scheme's reading; rank -1 when it does not apply.
struct Reading {
  int rank = -1, size = -1, local_rank = -1, local_size = -1;
  std::string rank_var, size_var;  // "NAME=value"
};

Reading read_scheme(const EnvLookup& env, const Scheme& s) {
  Reading x;
  x.rank = env_int(env, s.rank);
  if (x.rank < 0 || (x.rank == 0 && s.step && !env(s.step))) return {};
  x.rank_var = fmt::format("{}={}", s.rank, x.rank);
  for (const char* name : {s.size, s.size_alt}) {
    if (x.size >= 0 || !name) continue;
    x.size = env_int(env, name);
    if (x.size >= 0) x.size_var = fmt::format("{}={}", name, x.size);
  }
  x.local_rank = env_int(env, s.local_rank);
  // SLURM_NTASKS_PER_NODE may read "2(x3)"; only a plain number is taken.
  const char* ls = s.local_size ? env(s.local_size) : nullptr;
  x.local_size = ls && std::strchr(ls, '(') ? -1 : env_int(env, s.local_size);
  return x;
}

}  // namespace

EnvRank env_rank(const EnvLookup& env) {
  EnvRank r;
  std::string size_var;
  for (const Scheme& s : kSchemes) {
    const Reading x = read_scheme(env, s);
    if (x.rank < 0) continue;
    if (r.source.empty()) {
      r.source = s.source;
      r.rank = x.rank;
      r.seen = x.rank_var;
    }
    if (r.size < 0 && x.size >= 0) {
      r.size = x.size;
      size_var = x.size_var;
      r.seen += ", " + size_var;
    }
    if (r.local_rank < 0) r.local_rank = x.local_rank;
    if (r.local_size < 0) r.local_size = x.local_size;
    if (r.size >= 0) break;
  }
  PARALLM_CHECK(r.size < 0 || r.rank < r.size, ConfigError, "comm.env", "{} is not below {}",
                r.seen.substr(0, r.seen.find(',')), size_var);
  return r;
}

void check_joined(const Communicator& world, const EnvRank& er) {
  if (!er.several() || world.size() == er.size || (er.size < 0 && world.size() > 1)) return;
  const std::string task =
      er.size > 0 ? fmt::format("task {} of {}", er.rank, er.size) : fmt::format("task {} of several", er.rank);
  PARALLM_CHECK(world.backend() != "self", ConfigError, "comm",
                "backend self runs one rank alone, but this process is {} of a launched job ({}); it will not train "
                "alone: use backend auto or mpi, or start it as one process",
                task, er.seen);
  throw CommError("comm", fmt::format("this process is {} of a launched job ({}), but the {} backend started a world "
                                      "of {} rank{}: it cannot join the other tasks and will not run alone. Under "
                                      "srun, pass the PMI this MPI uses (--mpi=pmix for Open MPI, pmi2 for MPICH; "
                                      "srun --mpi=list shows them), or run `parallm launch -- ...`, which picks it",
                                      task, er.seen, world.backend(), world.size(), world.size() == 1 ? "" : "s"));
}

std::string missing_pmi_warning(const EnvLookup& env, const EnvRank& er) {
  if (!er.several() || er.source != "SLURM" || env("PMI_FD")) return "";
  const char* type = env("SLURM_MPI_TYPE");
  return fmt::format(
      "this process is task {} of a Slurm step ({}), but srun gave it no PMI (SLURM_MPI_TYPE={}; no PMIX_RANK, "
      "PMI_RANK or PMI_FD), so MPI may not find the other tasks (Open MPI's MPI_Init fails). Run srun --mpi=pmix "
      "(srun --mpi=list shows the plugins), or `parallm launch -- ...`, which picks it",
      er.rank, er.seen, type && *type ? type : "unset");
}

int threads_for(int my_cpus, int sharing_ranks, int cpus_per_task) {
  int t = std::max(1, my_cpus / std::max(1, sharing_ranks));
  if (cpus_per_task > 0) t = std::min(t, cpus_per_task);
  return t;
}

int default_threads(Communicator& world, int my_node, const EnvLookup& env) {
  // Every rank's node and mask, gathered even where OMP_NUM_THREADS decides: all ranks take part.
  constexpr int kLen = 1 + 2 * CpuMask::kWords;  // int32 words: node, then the mask
  const CpuMask mine = affinity_mask();
  const int n = world.size();
  Tensor me = Tensor::empty({kLen}, DType::I32), all = Tensor::empty({int64_t{kLen} * n}, DType::I32);
  auto* m = static_cast<int32_t*>(me.raw());
  m[0] = my_node;
  std::memcpy(m + 1, mine.words, sizeof(mine.words));
  world.all_gather(me, all);
  int sharing = 0;
  for (int r = 0; r < n; ++r) {
    const auto* rec = static_cast<const int32_t*>(all.raw()) + static_cast<size_t>(r) * kLen;
    CpuMask theirs;
    std::memcpy(theirs.words, rec + 1, sizeof(theirs.words));
    if (rec[0] == my_node && theirs.overlaps(mine)) ++sharing;
  }
  const char* omp = env("OMP_NUM_THREADS");
  if (omp && *omp) return 0;
  const int cpus = mine.count() > 0 ? mine.count() : usable_cores();
  return threads_for(cpus, sharing, env_int(env, "SLURM_CPUS_PER_TASK"));
}

}  // namespace parallm::comm
