// Starting the world for a subcommand, and ending it on error. Shared by
// train, test-dist, doctor and bench so they all print the same dist info
// and none leaves a peer hanging: the only place besides main() that decides
// to end the process.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology.h"
#include "parallel/mesh.h"

namespace parallm::cli {

struct World {
  std::unique_ptr<comm::Communicator> comm;
  comm::Topology topo;
  std::string host;
  comm::Communicator& operator*() const { return *comm; }
  comm::Communicator* operator->() const { return comm.get(); }
  World() = default;
  World(World&&) = default;
  World& operator=(World&&) = default;
  ~World();  // the timeout hook forgets the communicator it would abort
};

// Makes the world communicator (an error, on every rank, when this process
// is one of several launched tasks that the world does not join), tags log
// lines with [host:rank], finds where every rank runs, sets the threads per
// rank (`threads` when positive, else OMP_NUM_THREADS, else the cores the
// scheduler and the affinity masks give each rank: comm::default_threads)
// and (on rank 0, when `announce`) prints the dist info block.
World start_world(const std::string& backend, const comm::CommOptions& options, bool announce = true, int threads = 0);
// Rank 0 prints the dist info block; `rank_notes` (one per rank) end each rank's line. `gpu`: the run trains on
// GPUs (the device line says how ranks and GPUs pair, and how the backend carries device buffers).
void announce_world(const World& w, const std::vector<std::string>& rank_notes = {}, bool gpu = false);
// The dist info with each rank's coordinates on the mesh `dims` describes,
// as `parallm train` prints it (without them when the layout does not fit
// the world: the trainer then names the problem).
void announce_mesh(const World& w, const parallel::MeshDims& dims, bool tp_across_nodes, bool gpu = false);
// The most ranks any node runs (bounds a tensor-parallel group).
int ranks_per_node(const comm::Topology& t);

// The --backend and --timeout options every world-starting subcommand has;
// `timeout_help` says what the timeout means for that command.
void add_world_options(CLI::App* cmd, std::string& backend, double& timeout_s, const std::string& timeout_help);

// Runs `body`; if it throws a parallm Error on a world of several ranks,
// prints "[host:rank] error: ..." and aborts the whole job (exit code 2 for
// bad input, else 1) so no peer waits. On one rank the error goes to main().
int run_guarded(World& w, const std::function<int()>& body);

}  // namespace parallm::cli
