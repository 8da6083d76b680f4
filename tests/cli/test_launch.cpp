// The launcher's plans under every scheduler it knows, played through fake
// environments, and the placement of ranks computed from host names.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/launch.h"
#include "cli/launch_retry.h"
#include "comm/topology.h"
#include "core/error.h"

namespace parallm::cli {
namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  comm::EnvLookup lookup() const {
    return [this](const char* k) -> const char* {
      auto it = vars.find(k);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

Machine machine(MpiFlavor f, int cores, std::map<std::string, std::string> files = {}) {
  Machine m;
  m.flavor = f;
  m.cores = cores;
  m.root = true;
  m.on_path = [](const std::string& p) { return p == "mpirun" || p == "mpiexec" || p == "srun"; };
  m.read_file = [files](const std::string& path) {
    auto it = files.find(path);
    if (it == files.end()) throw IoError("launch", "cannot read " + path);
    return it->second;
  };
  return m;
}

LaunchRequest request(int n, std::vector<std::string> cmd = {"parallm", "train"}) {
  LaunchRequest r;
  r.n = n;
  r.command = std::move(cmd);
  return r;
}

std::string joined(const LaunchPlan& p) {
  return shell_join(p.argv);
}

TEST(Launch, LocalOpenMpiBindsOneCorePerRank) {
  FakeEnv env;
  const LaunchPlan p = plan_launch(request(2), env.lookup(), machine(MpiFlavor::OpenMpi, 2));
  EXPECT_EQ(p.mode, "local");
  EXPECT_EQ(p.threads, 1);
  EXPECT_EQ(joined(p),
            "mpirun -n 2 --allow-run-as-root --map-by ppr:2:node:PE=1 --bind-to core -x OMP_NUM_THREADS parallm train");
}

TEST(Launch, LocalMoreRanksThanCoresOversubscribes) {
  FakeEnv env;
  const LaunchPlan p = plan_launch(request(5), env.lookup(), machine(MpiFlavor::OpenMpi, 2));
  EXPECT_NE(joined(p).find("--oversubscribe --bind-to none"), std::string::npos) << joined(p);
  EXPECT_EQ(p.threads, 1);
}

TEST(Launch, ThreadsShareTheCoresUnlessSet) {
  FakeEnv env;
  EXPECT_EQ(plan_launch(request(2), env.lookup(), machine(MpiFlavor::OpenMpi, 16)).threads, 8);
  env.vars["OMP_NUM_THREADS"] = "3";
  const LaunchPlan p = plan_launch(request(2), env.lookup(), machine(MpiFlavor::OpenMpi, 16));
  EXPECT_EQ(p.threads, 3);
  EXPECT_NE(joined(p).find("ppr:2:node:PE=3"), std::string::npos);
  env.vars["OMP_NUM_THREADS"] = "many";
  EXPECT_THROW(plan_launch(request(2), env.lookup(), machine(MpiFlavor::OpenMpi, 16)), ConfigError);
}

TEST(Launch, OneLocalRankRunsDirectly) {
  FakeEnv env;
  const LaunchPlan p = plan_launch(request(-1), env.lookup(), machine(MpiFlavor::None, 2));
  EXPECT_EQ(joined(p), "parallm train");
  EXPECT_THROW(plan_launch(request(2), env.lookup(), machine(MpiFlavor::None, 2)), ConfigError);
}

TEST(Launch, InsideALaunchedJobDoesNotNest) {
  FakeEnv env;
  env.vars = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
  const LaunchPlan p = plan_launch(request(4), env.lookup(), machine(MpiFlavor::OpenMpi, 2));
  EXPECT_EQ(p.mode, "inside");
  EXPECT_EQ(joined(p), "parallm train");
}

TEST(Launch, SlurmUsesSrunWithTheJobsShape) {
  FakeEnv env;
  env.vars = {{"SLURM_JOB_ID", "77"},
              {"SLURM_JOB_NUM_NODES", "4"},
              {"SLURM_NTASKS_PER_NODE", "2(x4)"},
              {"SLURM_PROCID", "0"}};  // a batch script: not yet a step, so not "inside"
  const LaunchPlan p = plan_launch(request(-1), env.lookup(), machine(MpiFlavor::OpenMpi, 8));
  EXPECT_EQ(p.mode, "slurm");
  EXPECT_EQ(joined(p), "srun -n 8 --ntasks-per-node 2 --cpus-per-task 4 parallm train");
  // -n spread over the job's nodes.
  const LaunchPlan q = plan_launch(request(3), env.lookup(), machine(MpiFlavor::OpenMpi, 8));
  EXPECT_EQ(q.ppn, 1);
  EXPECT_EQ(q.ranks, 3);
  EXPECT_EQ(joined(q), "srun -n 3 --ntasks-per-node 1 --cpus-per-task 8 -N 3 parallm train");  // one node spare
  // Fewer ranks than the job's nodes hold at --ppn: only the nodes they fill (the others spare for restarts).
  LaunchRequest r = request(4);
  r.ppn = 2;
  EXPECT_EQ(joined(plan_launch(r, env.lookup(), machine(MpiFlavor::OpenMpi, 8))),
            "srun -n 4 --ntasks-per-node 2 --cpus-per-task 4 -N 2 parallm train");
}

// srun gets the PMI plugin this MPI needs among those `srun --mpi=list` offers (MpiDefault=none otherwise).
TEST(Launch, SlurmPicksThePmiThisMpiNeeds) {
  FakeEnv env;
  env.vars = {{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NUM_NODES", "1"}, {"SLURM_NTASKS", "2"}};
  auto m = machine(MpiFlavor::OpenMpi, 2);
  m.srun_mpi_list = [] {
    return "MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
           "specific pmix plugin versions available: pmix_v4\n";
  };
  LaunchPlan p = plan_launch(request(-1), env.lookup(), m);
  EXPECT_EQ(joined(p), "srun -n 2 --ntasks-per-node 2 --cpus-per-task 1 --mpi=pmix parallm train");
  EXPECT_NE(p.why.find("PMI pmix for Open MPI"), std::string::npos) << p.why;
  m.flavor = MpiFlavor::Mpich;
  EXPECT_NE(joined(plan_launch(request(-1), env.lookup(), m)).find(" --mpi=pmi2 "), std::string::npos);
  // The user's choice stays: --mpi-arg --mpi=..., or SLURM_MPI_TYPE (which srun reads itself).
  LaunchRequest r = request(-1);
  r.extra = {"--mpi=pmix_v4"};
  EXPECT_EQ(joined(plan_launch(r, env.lookup(), m)),
            "srun -n 2 --ntasks-per-node 2 --cpus-per-task 1 --mpi=pmix_v4 parallm train");
  env.vars["SLURM_MPI_TYPE"] = "pmi2";
  p = plan_launch(request(-1), env.lookup(), m);
  EXPECT_EQ(joined(p).find("--mpi"), std::string::npos) << joined(p);
  EXPECT_NE(p.why.find("SLURM_MPI_TYPE=pmi2"), std::string::npos) << p.why;
  // SLURM_MPI_TYPE=none names no PMI (tasks could not join): one is picked as if it were unset.
  env.vars["SLURM_MPI_TYPE"] = "none";
  EXPECT_NE(joined(plan_launch(request(-1), env.lookup(), m)).find(" --mpi=pmi2 "), std::string::npos);
  // Nothing that fits: srun's MpiDefault applies, and the plan says so.
  env.vars.erase("SLURM_MPI_TYPE");
  m.flavor = MpiFlavor::OpenMpi;
  m.srun_mpi_list = [] { return "srun: MPI types are...\nsrun: none\n"; };
  p = plan_launch(request(-1), env.lookup(), m);
  EXPECT_EQ(joined(p).find("--mpi"), std::string::npos) << joined(p);
  EXPECT_NE(p.why.find("srun offers no PMI Open MPI uses (none)"), std::string::npos) << p.why;
}

TEST(Launch, SrunMpiList) {
  // Slurm 22.05 and later.
  EXPECT_EQ(parse_srun_mpi_list("MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
                                "specific pmix plugin versions available: pmix_v4\n"),
            (std::vector<std::string>{"pmix", "none", "cray_shasta", "pmi2", "pmix_v4"}));
  // Slurm 20.11 and earlier, on stderr with srun's prefix.
  EXPECT_EQ(parse_srun_mpi_list("srun: MPI types are...\nsrun: none\nsrun: pmi2\nsrun: pmix_v3\n"),
            (std::vector<std::string>{"none", "pmi2", "pmix_v3"}));
  EXPECT_TRUE(parse_srun_mpi_list("").empty());
  const std::vector<std::string> all = {"none", "pmi2", "pmix", "cray_shasta"};
  EXPECT_EQ(pick_srun_mpi(MpiFlavor::OpenMpi, all), "pmix");
  EXPECT_EQ(pick_srun_mpi(MpiFlavor::OpenMpi, {"none", "pmix_v3"}), "pmix_v3");
  EXPECT_EQ(pick_srun_mpi(MpiFlavor::OpenMpi, {"none", "pmi2"}), "pmi2");
  EXPECT_EQ(pick_srun_mpi(MpiFlavor::Mpich, all), "pmi2");
  EXPECT_EQ(pick_srun_mpi(MpiFlavor::Mpich, {"none", "pmix"}), "pmix");
  EXPECT_EQ(pick_srun_mpi(MpiFlavor::Pals, all), "cray_shasta");
  EXPECT_EQ(pick_srun_mpi(MpiFlavor::OpenMpi, {"none"}), "");
  EXPECT_EQ(pick_srun_mpi(MpiFlavor::None, all), "");
}

TEST(Launch, PbsReadsTheNodeFile) {
  FakeEnv env;
  env.vars = {{"PBS_JOBID", "9.pbs"}, {"PBS_NODEFILE", "/var/spool/nodes"}};
  auto m = machine(MpiFlavor::Pals, 64, {{"/var/spool/nodes", "x1\nx1\nx2\nx2\n"}});
  LaunchRequest r = request(-1, {"parallm", "train", "it's here"});
  r.ppn = 4;
  const LaunchPlan p = plan_launch(r, env.lookup(), m);
  EXPECT_EQ(p.mode, "pbs");
  EXPECT_EQ(p.nodes, 2);
  EXPECT_EQ(joined(p),
            "mpiexec -n 8 --ppn 4 --hostfile /var/spool/nodes --depth 16 --cpu-bind depth --env OMP_NUM_THREADS=16 "
            "parallm train 'it'\\''s here'");
}

TEST(Launch, HostfileWithMpichAndExtraArguments) {
  FakeEnv env;
  auto m = machine(MpiFlavor::Mpich, 4, {{"hosts", "# two nodes\nnodeA:4\nnodeB:4\n"}});
  LaunchRequest r = request(4);
  r.hostfile = "hosts";
  r.extra = {"-verbose"};
  const LaunchPlan p = plan_launch(r, env.lookup(), m);
  EXPECT_EQ(p.ppn, 2);
  EXPECT_EQ(joined(p), "mpiexec -n 4 -ppn 2 -f hosts -bind-to core:2 -genv OMP_NUM_THREADS 2 -verbose parallm train");
  r.n = 5;
  r.ppn = 2;
  EXPECT_THROW(plan_launch(r, env.lookup(), m), ConfigError);  // 5 ranks on 2 nodes x 2
}

TEST(Launch, BadRequestsAreNamed) {
  FakeEnv env;
  auto m = machine(MpiFlavor::OpenMpi, 2);
  LaunchRequest r = request(2);
  r.launcher = "pdsh";
  EXPECT_THROW(plan_launch(r, env.lookup(), m), ConfigError);
  EXPECT_THROW(plan_launch(request(2, {}), env.lookup(), m), ConfigError);
  r = request(0);
  EXPECT_THROW(plan_launch(r, env.lookup(), m), ConfigError);
  r = request(2);
  r.hostfile = "missing";
  EXPECT_THROW(plan_launch(r, env.lookup(), m), IoError);
  r = request(2);
  r.ppn = 1;  // several nodes needed for a ppn below n
  EXPECT_THROW(plan_launch(r, env.lookup(), m), ConfigError);
}

TEST(Hostfile, Formats) {
  const Hostfile h = parse_hostfile("a slots=2 max_slots=4\n\nb:3  # comment\na\n  c\n", "hf");
  ASSERT_EQ(h.hosts, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(h.slots, (std::vector<int>{3, 3, 1}));
  EXPECT_THROW(parse_hostfile("a slots=x\n", "hf"), ConfigError);
  EXPECT_THROW(parse_hostfile("a b\n", "hf"), ConfigError);
  EXPECT_THROW(parse_hostfile("# nothing\n", "hf"), ConfigError);
  try {
    parse_hostfile("a\nb:0\n", "nodes.txt");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nodes.txt:2"), std::string::npos) << e.what();
  }
}

TEST(Launch, ShellQuoting) {
  EXPECT_EQ(shell_quote("train.lr=1e-3"), "train.lr=1e-3");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("$HOME;rm"), "'$HOME;rm'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

TEST(Launch, FlavorFromLibraryVersion) {
  EXPECT_EQ(flavor_from_library("Open MPI v4.1.4, package: Debian OpenMPI", false), MpiFlavor::OpenMpi);
  EXPECT_EQ(flavor_from_library("MPICH Version:      4.0.2", false), MpiFlavor::Mpich);
  EXPECT_EQ(flavor_from_library("MPI VERSION    : CRAY MPICH version 8.1.28", true), MpiFlavor::Pals);
  EXPECT_EQ(flavor_from_library("", false), MpiFlavor::None);
}

// Restarts (launch_retry.h): a failed host left out of the next attempt, under Slurm (srun --exclude, -N of the
// job's other nodes, refused when too few remain) and with a hostfile (its lines dropped).
TEST(Launch, ARestartLeavesTheFailedHostOut) {
  FakeEnv env;
  env.vars = {{"SLURM_JOB_ID", "77"}, {"SLURM_JOB_NUM_NODES", "4"}, {"SLURM_PROCID", "0"}};
  LaunchRequest r = request(6);
  r.ppn = 2;
  r.exclude = {"b"};
  const LaunchPlan p = plan_launch(r, env.lookup(), machine(MpiFlavor::OpenMpi, 8));
  EXPECT_EQ(p.nodes, 3);
  EXPECT_EQ(joined(p), "srun -n 6 --ntasks-per-node 2 --cpus-per-task 4 -N 3 --exclude=b parallm train");
  r.restart = true;  // the failed step may still hold CPUs: the restart's step shares them
  EXPECT_EQ(joined(plan_launch(r, env.lookup(), machine(MpiFlavor::OpenMpi, 8))),
            "srun -n 6 --ntasks-per-node 2 --cpus-per-task 4 -N 3 --overlap --exclude=b parallm train");
  r.restart = false;
  r.exclude = {"b", "c"};  // 2 nodes x 2 ranks < 6
  EXPECT_THROW(plan_launch(r, env.lookup(), machine(MpiFlavor::OpenMpi, 8)), ConfigError);
  EXPECT_EQ(hostfile_without("# hosts\na slots=2\nb slots=2\n\nc:2\nbb slots=1\n", {"b", "c"}),
            "# hosts\na slots=2\n\nbb slots=1\n");
}

TEST(Launch, TheLostPeerOutweighsTheRanksThatEndedThemselves) {
  EXPECT_EQ(failed_host_weight("[a:0] error: [comm.all_gather] ... ranks 2,3 on host b did not answer within 1.0 s"),
            3);
  EXPECT_EQ(failed_host_weight("srun: error: b: task 2: Killed"), 2);
  EXPECT_EQ(failed_host_weight("srun: error: a: task 0: Exited with exit code 1"), 1);
  EXPECT_EQ(failed_host_weight("[a:0] error: [config] bad key"), 0);
}

TEST(Launch, TheFailedHostIsTheOneMostHostsLost) {
  FailedHost f;
  f.add("srun: error: a: task 0: Exited with exit code 1");
  EXPECT_EQ(f.host(), "a");
  f.add("srun: error: c: task 5: Killed");
  EXPECT_EQ(f.host(), "c");
  // A partition seen from both sides: b names c... and c names a; a names c too: c, by two reporters.
  f.add("[c:4] error: [comm.all_reduce] ... rank 0 on host a did not answer within 1.0 s");
  EXPECT_EQ(f.host(), "a");
  f.add("[a:0] error: [comm.all_reduce] ... ranks 4,5 on host c did not answer within 1.0 s");
  f.add("[a:1] error: [comm.all_reduce] ... ranks 4,5 on host c did not answer within 1.0 s");  // the same reporter
  EXPECT_EQ(f.host(), "a");  // one reporter each: the first named
  f.add("[b:2] error: [comm.all_reduce] ... ranks 4,5 on host c did not answer within 1.0 s");
  EXPECT_EQ(f.host(), "c");
  f.add("srun: error: d: task 7: Killed");  // lighter than the reports of lost peers
  EXPECT_EQ(f.host(), "c");
}

TEST(Launch, OpenMpisDisconnectedPeerNamesItsHost) {
  EXPECT_TRUE(is_failure_report("  Peer host:  host1"));
  EXPECT_EQ(failed_host("  Peer host:  host1"), "host1");
  EXPECT_EQ(failed_host_weight("  Peer host:  host1"), 2);
  EXPECT_FALSE(is_failure_report("  Local host: host0"));
}

TEST(Launch, FailureReportsNameTheirHost) {
  EXPECT_EQ(failed_host("mpirun noticed that process rank 1 with PID 4242 on node nodeb exited on signal 9 (Killed)."),
            "nodeb");
  EXPECT_EQ(failed_host("prterun noticed that process rank 3 with PID 0 on node gpu-07 exited on signal 9 (Killed)."),
            "gpu-07");
  EXPECT_EQ(failed_host("srun: error: nid001234: task 5: Killed"), "nid001234");
  EXPECT_EQ(failed_host("srun: error: nodec: tasks 0-1: Exited with exit code 1"), "nodec");
  EXPECT_EQ(failed_host("error: [comm] rank 2 on host nodeb stopped answering"), "nodeb");
  EXPECT_EQ(failed_host("error: [config] unknown key"), "");
  EXPECT_TRUE(is_failure_report("error: [config] unknown key"));
  EXPECT_TRUE(is_failure_report("[vm:1] error: something"));
  EXPECT_FALSE(is_failure_report("iter 10: loss 2.5"));
  EXPECT_FALSE(is_failure_report("srun: job 77 queued"));
  EXPECT_EQ(restart_command({"/bin/parallm", "train", "a=1"}),
            (std::vector<std::string>{"/bin/parallm", "train", "a=1", "train.init_from=auto"}));
  EXPECT_EQ(restart_command({"./job.sh", "x"}), (std::vector<std::string>{"./job.sh", "x"}));
}

TEST(Launch, RestartsRunTheJobAgainAndListEveryCause) {
  const std::string marker = ::testing::TempDir() + "restart_marker_" + std::to_string(::getpid());
  std::remove(marker.c_str());
  // Fails once naming host nodeb, then succeeds: one restart, and the plan of it leaves nodeb out.
  std::vector<LaunchRequest> asked;
  auto plan = [&](const std::string& script) {
    return [&, script](const LaunchRequest& r) {
      asked.push_back(r);
      LaunchPlan p;
      p.argv = {"sh", "-c", script};
      return p;
    };
  };
  LaunchRequest r = request(2, {"sh"});
  RestartOptions o;
  o.restarts = 2;
  o.backoff_s = 0;
  o.self_host = "vm";
  const std::string once =
      "test -f " + marker + " && exit 0; touch " + marker + "; echo 'srun: error: nodeb: task 1: Killed' >&2; exit 3";
  EXPECT_EQ(run_with_restarts(r, o, plan(once)), 0);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_TRUE(asked[0].exclude.empty());
  EXPECT_EQ(asked[1].exclude, std::vector<std::string>{"nodeb"});
  std::remove(marker.c_str());
  // Fails every time: 1 + 2 attempts, the last one's status.
  asked.clear();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_with_restarts(r, o, plan("echo 'error: [train] the same failure' >&2; exit 5")), 5);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(asked.size(), 3u);
  EXPECT_NE(err.find("the job failed 3 times"), std::string::npos) << err;
  for (const char* a : {"attempt 1: exit status 5; error: [train] the same failure", "attempt 3: exit status 5"})
    EXPECT_NE(err.find(a), std::string::npos) << err;
}

}  // namespace
}  // namespace parallm::cli

namespace parallm::comm {
namespace {

TEST(Topology, PlacementFromHostNames) {
  const Topology t = topology_from_hosts({"a", "a", "b", "a", "b"});
  ASSERT_EQ(t.nodes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.ranks[3].node, 0);
  EXPECT_EQ(t.ranks[3].local_rank, 2);
  EXPECT_EQ(t.ranks[3].local_size, 3);
  EXPECT_EQ(t.ranks[4].node, 1);
  EXPECT_EQ(t.ranks[4].local_rank, 1);
  const std::string info = dist_info(t, "mpi", "cpu");
  EXPECT_NE(info.find("world size 5, 2 nodes, 2-3 ranks per node"), std::string::npos) << info;
  EXPECT_NE(info.find("[rank 4/5][local_rank 1][node 1/2][b]"), std::string::npos) << info;
}

TEST(Topology, ManyRanksAreSummarized) {
  std::vector<std::string> hosts;
  for (int r = 0; r < 1000; ++r) hosts.push_back(fmt::format("n{}", r / 4));
  const std::string info = dist_info(topology_from_hosts(hosts), "mpi", "cpu");
  EXPECT_NE(info.find("250 nodes, 4 ranks per node"), std::string::npos);
  EXPECT_NE(info.find("[rank 999/1000][local_rank 3][node 249/250][n249]"), std::string::npos);
  EXPECT_NE(info.find("(936 ranks)"), std::string::npos);
  EXPECT_LT(std::count(info.begin(), info.end(), '\n'), 80);
}

}  // namespace

}  // namespace parallm::comm
