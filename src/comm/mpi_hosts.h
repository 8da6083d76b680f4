// Where each rank of an MPI job runs (the world's host names gathered once,
// each group rank's world rank and host) and what the ranks of a group are
// doing (asked on a timeout): for errors and the hang record.
#pragma once
#include <mpi.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "comm/peer_status.h"

namespace parallm::comm {

// Every world rank's host name (collective over `world`, once at start).
std::vector<std::string> mpi_gather_hosts(MPI_Comm world);
// The tags of "what are you doing?" (the operation's number) and its answer (a StatusAnswer) on a group's control
// communicator.
constexpr int kTagStatusReq = 32767, kTagStatusRep = 32766;
// Asks every other rank of `ctrl` and collects the answers that come within `budget_s` (by rank), calling
// `meanwhile` between polls (this rank answering its own peers).
std::map<int, StatusAnswer> mpi_ask_peers(MPI_Comm ctrl, uint64_t seq, double budget_s,
                                          const std::function<void()>& meanwhile);
// Each rank of `group`: its world rank and host ("" where unknown).
Places mpi_places(MPI_Comm group, const std::vector<std::string>& world_hosts);

}  // namespace parallm::comm
