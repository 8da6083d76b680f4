#include "cli/world.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/options.h"
#include "comm/hang_record.h"
#include "core/env.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "core/threads.h"
#include "core/trace.h"

namespace parallm::cli {

namespace {
// Ends this process `grace_s` from now unless it has ended by then, saying why: a rank whose peer is lost may block
// while unwinding (a library call the peer holds) or in MPI_Abort (a launcher that cannot reach a lost host never
// ends the job). The first deadline stands.
std::atomic<bool> g_deadline{false};
std::string g_host;
int g_rank = 0;
void end_within(double grace_s, int code, const std::string& why) {
  if (g_deadline.exchange(true)) return;
  std::thread([grace_s, code, why] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace_s));
    std::fprintf(stderr, "[%s:%d] error: %s; still running %.0f s later: this process ends itself\n", g_host.c_str(),
                 g_rank, why.c_str(), grace_s);
    std::fflush(stderr);
    std::_Exit(code);
  }).detach();
}
// comm::set_timeout_hook's: a timed-out operation ends the job; the process ends within kTimeoutGraceS whatever
// blocks its way out. An operation stuck on the thread that issued it (it never returns to report) is reported
// here and the job aborted, as run_guarded does for an error that unwinds.
constexpr double kTimeoutGraceS = 8, kAbortGraceS = 5;
std::atomic<comm::Communicator*> g_world{nullptr};
void on_timeout(const std::string& message, bool unwinds) {
  if (unwinds) {
    end_within(kTimeoutGraceS, 1, message);
    return;
  }
  stop_signal::ending_on_error();
  std::fprintf(stderr, "[%s:%d] error: %s\n", g_host.c_str(), g_rank, message.c_str());
  std::fflush(stderr);
  end_within(kAbortGraceS, 1, "MPI_Abort did not end the job (the launcher may have lost a host)");
  if (comm::Communicator* c = g_world.load()) c->abort(1);
}
}  // namespace

World::~World() {
  comm::Communicator* mine = comm.get();
  if (mine) g_world.compare_exchange_strong(mine, nullptr);
}

World start_world(const std::string& backend, const comm::CommOptions& options, bool announce, int threads) {
  World w;
  const comm::EnvRank launched = comm::env_rank();  // before MPI starts: MPI_Init may add its own variables
  w.comm = comm::make_world(backend, options);
  // One of several tasks that could not join them stops here, on every task, rather than train alone.
  comm::check_joined(*w.comm, launched);
  w.host = comm::this_host();
  g_host = w.host;
  g_rank = w.comm->rank();
  g_world = w.comm.get();
  if (w.comm->size() > 1) comm::set_timeout_hook(&on_timeout);
  log::set_rank(w.comm->rank(), w.host);
  // kill -USR2 (or a communication timeout) writes every thread's stack here.
  std::error_code ec;  // absolute: the path goes into error messages read elsewhere
  const std::filesystem::path dir = std::filesystem::absolute(env::value(env::Var::TraceDir), ec).lexically_normal();
  trace::install((dir / fmt::format("trace-{}-{}.txt", w.host, w.comm->rank())).string());
  // A run records its hangs in its out_dir instead.
  comm::set_hang_record_path((dir / fmt::format("hang-{}-{}.json", w.host, w.comm->rank())).string());
  run_guarded(w, [&] {
    w.topo = comm::discover_topology(*w.comm, w.host);
    const int t = comm::default_threads(*w.comm, w.topo.me(w.comm->rank()).node);
    if (threads > 0 || t > 0) set_num_threads(threads > 0 ? threads : t);
    return 0;
  });
  if (announce) announce_world(w);
  return w;
}

namespace {
// The dist info's device: the CPU's threads, or how ranks and GPUs pair.
std::string device_text(const World& w, bool gpu) {
  if (w.comm->gpu_device() >= 0) return "cuda (one GPU per rank, by local rank)";
  if (!gpu) return fmt::format("cpu ({} thread{} per rank)", num_threads(), num_threads() == 1 ? "" : "s");
  const int gpus = gpu::device_count(), per_node = std::max(1, ranks_per_node(w.topo));
  const std::string carried =
      w.comm->size() > 1 ? fmt::format("; {} carries device buffers through pinned host memory", w.comm->backend())
                         : "";
  if (gpus <= 0) return "cuda (no GPU visible)";
  if (per_node <= gpus) return fmt::format("cuda (one GPU per rank, by local rank{})", carried);
  return fmt::format("cuda ({} ranks per node on {} GPU{}: up to {} ranks share one, by local rank{})", per_node, gpus,
                     gpus == 1 ? "" : "s", (per_node + gpus - 1) / gpus, carried);
}
}  // namespace

void announce_world(const World& w, const std::vector<std::string>& rank_notes, bool gpu) {
  if (w.comm->rank() != 0) return;
  std::fputs(comm::dist_info(w.topo, w.comm->backend(), device_text(w, gpu), rank_notes).c_str(), stdout);
  std::fflush(stdout);
}

int ranks_per_node(const comm::Topology& t) {
  int most = 0;
  for (const comm::RankPlace& p : t.ranks) most = std::max(most, p.local_size);
  return most;
}

void announce_mesh(const World& w, const parallel::MeshDims& dims, bool tp_across_nodes, bool gpu) {
  parallel::MeshDims d;
  try {
    d = parallel::resolve_mesh_dims(dims, w.comm->size(), ranks_per_node(w.topo), tp_across_nodes);
  } catch (const ConfigError&) {  // the trainer says what is wrong, after the config's own checks
    announce_world(w, {}, gpu);
    return;
  }
  std::vector<std::string> notes;
  for (int r = 0; w.comm->rank() == 0 && r < w.comm->size(); ++r)
    notes.push_back(parallel::coord_text(d, parallel::mesh_coord(d, r)));
  announce_world(w, notes, gpu);
}

void add_world_options(CLI::App* cmd, std::string& backend, double& timeout_s, const std::string& timeout_help) {
  cmd->add_option("--backend", backend, "auto, self, mpi or nccl")->capture_default_str();
  cmd->add_option("--timeout", timeout_s, timeout_help)->check(number_in(0, kMaxTimeoutS, true))->capture_default_str();
}

int run_guarded(World& w, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {  // any error: no peer may be left waiting in a collective
    if (w.comm->size() == 1) throw;
    stop_signal::ending_on_error();  // the launcher's SIGTERM that the abort brings must not promise a save
    std::fprintf(stderr, "[%s:%d] error: %s\n", w.host.c_str(), w.comm->rank(), e.what());
    std::fflush(stderr);
    const int code = dynamic_cast<const ConfigError*>(&e) ? 2 : 1;
    end_within(kAbortGraceS, code, "MPI_Abort did not end the job (the launcher may have lost a host)");
    w.comm->abort(code);
    return 1;
  }
}

}  // namespace parallm::cli
