#include "cli/world.h"

#include <cstdio>
#include <cstdlib>

#include "cli/options.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/threads.h"
#include "core/trace.h"

namespace parallm::cli {

World start_world(const std::string& backend, const comm::CommOptions& options, bool announce) {
  World w;
  w.comm = comm::make_world(backend, options);
  w.host = comm::this_host();
  log::set_rank(w.comm->rank(), w.host);
  // kill -USR2 (or a communication timeout) writes every thread's stack here.
  const std::string dir = env::value(env::Var::TraceDir);
  trace::install(fmt::format("{}/trace-{}-{}.txt", dir, w.host, w.comm->rank()));
  run_guarded(w, [&] {
    w.topo = comm::discover_topology(*w.comm, w.host);
    return 0;
  });
  if (announce && w.comm->rank() == 0) {
    const std::string device = w.comm->gpu_device() >= 0 ? "cuda (one GPU per rank, by local rank)"
                                                         : fmt::format("cpu ({} thread{} per rank)", num_threads(),
                                                                       num_threads() == 1 ? "" : "s");
    std::fputs(comm::dist_info(w.topo, w.comm->backend(), device).c_str(), stdout);
    std::fflush(stdout);
  }
  return w;
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
    std::fprintf(stderr, "[%s:%d] error: %s\n", w.host.c_str(), w.comm->rank(), e.what());
    std::fflush(stderr);
    w.comm->abort(dynamic_cast<const ConfigError*>(&e) ? 2 : 1);
    return 1;
  }
}

}  // namespace parallm::cli
