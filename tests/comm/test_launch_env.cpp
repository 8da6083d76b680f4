// Rank detection under every launcher, played through fake environments:
// which variables give the rank and the size, that a task of several which
// the world does not join is an error naming them, and the threads per rank.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "core/error.h"
#include "core/host.h"

namespace parallm::comm {
namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* k) -> const char* {
      auto it = vars.find(k);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EnvRank, Schemes) {
  FakeEnv env;
  EXPECT_EQ(env_rank(env.lookup()).source, "");
  env.vars = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}};  // batch script, not a step
  EXPECT_EQ(env_rank(env.lookup()).size, -1);
  env.vars["SLURM_STEP_ID"] = "0";
  env.vars["SLURM_LOCALID"] = "0";
  EXPECT_EQ(env_rank(env.lookup()).size, 4);
  env.vars = {{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}};
  EnvRank r = env_rank(env.lookup());
  EXPECT_EQ(r.source, "PMI");
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.local_rank, 0);
  EXPECT_EQ(r.seen, "PMI_RANK=2, PMI_SIZE=3");
  env.vars = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}};
  EXPECT_EQ(env_rank(env.lookup()).source, "RANK");
  env.vars = {{"RANK", "x"}};
  EXPECT_THROW(env_rank(env.lookup()), ConfigError);
  env.vars = {{"RANK", "2"}, {"WORLD_SIZE", "2"}};
  EXPECT_NE(message_of([&] { env_rank(env.lookup()); }).find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
}

// srun --mpi=pmix: PMIx names the rank but no size; the step's size comes from Slurm.
TEST(EnvRank, PmixUnderSrunTakesTheStepsSize) {
  FakeEnv env;
  env.vars = {{"PMIX_RANK", "1"},    {"SLURM_PROCID", "1"},         {"SLURM_STEP_ID", "0"},
              {"SLURM_NTASKS", "4"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "1"}};
  const EnvRank r = env_rank(env.lookup());
  EXPECT_EQ(r.source, "PMIX");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.size, 2);  // the step's, not the job's
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.seen, "PMIX_RANK=1, SLURM_STEP_NUM_TASKS=2");
  EXPECT_TRUE(r.several());
}

TEST(EnvRank, SeveralTasks) {
  FakeEnv env;
  env.vars = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}};  // rank 1: a task, whether or not SLURM_STEP_ID is set
  EXPECT_EQ(env_rank(env.lookup()).seen, "SLURM_PROCID=1, SLURM_NTASKS=2");
  EXPECT_TRUE(env_rank(env.lookup()).several());
  env.vars = {{"PMIX_RANK", "3"}};  // no size anywhere, but rank 3 is not alone
  EXPECT_TRUE(env_rank(env.lookup()).several());
  env.vars = {{"PALS_RANKID", "0"}, {"PMI_SIZE", "8"}};
  EXPECT_EQ(env_rank(env.lookup()).source, "PALS");
  EXPECT_EQ(env_rank(env.lookup()).size, 8);
  env.vars = {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}};
  EXPECT_FALSE(env_rank(env.lookup()).several());
}

TEST(CheckJoined, ATaskOfSeveralAloneIsAnErrorNamingTheVariables) {
  auto self = make_world("self");
  FakeEnv env;
  EXPECT_NO_THROW(check_joined(*self, env_rank(env.lookup())));  // no launcher: one rank is right
  env.vars = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}};
  const EnvRank er = env_rank(env.lookup());
  EXPECT_THROW(check_joined(*self, er), ConfigError);
  const std::string m = message_of([&] { check_joined(*self, er); });
  EXPECT_NE(m.find("task 1 of 2"), std::string::npos) << m;
  EXPECT_NE(m.find("SLURM_PROCID=1, SLURM_NTASKS=2"), std::string::npos) << m;
  EXPECT_NE(m.find("will not train alone"), std::string::npos) << m;
  env.vars = {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}};
  EXPECT_THROW(check_joined(*self, env_rank(env.lookup())), ConfigError);
}

TEST(MissingPmi, OnlyForSrunTasksWithoutOne) {
  FakeEnv env;
  env.vars = {{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}};
  const std::string w = missing_pmi_warning(env.lookup(), env_rank(env.lookup()));
  EXPECT_NE(w.find("SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=2"), std::string::npos) << w;
  EXPECT_NE(w.find("srun --mpi=pmix"), std::string::npos) << w;
  env.vars["PMI_FD"] = "13";  // srun --mpi=pmi2 (PMI_RANK, PMI_SIZE as well)
  EXPECT_EQ(missing_pmi_warning(env.lookup(), env_rank(env.lookup())), "");
  env.vars.erase("PMI_FD");
  env.vars["PMIX_RANK"] = "0";  // srun --mpi=pmix
  EXPECT_EQ(missing_pmi_warning(env.lookup(), env_rank(env.lookup())), "");
  env.vars = {{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}};
  EXPECT_EQ(missing_pmi_warning(env.lookup(), env_rank(env.lookup())), "");  // one task
}

TEST(Threads, SharedCoresAndTheSchedulersCpusPerTask) {
  EXPECT_EQ(threads_for(2, 2, -1), 1);  // salloc -n 2 srun on 2 cores, unbound: one each
  EXPECT_EQ(threads_for(16, 2, 4), 4);  // srun -c 4 without binding: the allocation, not the node
  EXPECT_EQ(threads_for(4, 1, -1), 4);  // bound to 4 cores of its own
  EXPECT_EQ(threads_for(1, 3, -1), 1);  // never 0
  EXPECT_EQ(threads_for(2, 1, 8), 2);   // never more than the mask
  auto self = make_world("self");
  FakeEnv env;
  EXPECT_EQ(default_threads(*self, 0, env.lookup()), usable_cores());  // one rank: its whole mask
  env.vars = {{"SLURM_CPUS_PER_TASK", "1"}};
  EXPECT_EQ(default_threads(*self, 0, env.lookup()), 1);
  env.vars = {{"OMP_NUM_THREADS", "3"}};
  EXPECT_EQ(default_threads(*self, 0, env.lookup()), 0);  // the user's choice stays
}

}  // namespace
}  // namespace parallm::comm
