// Where each rank of an MPI job runs: the world's host names gathered once,
// and where each rank of a group runs (its world rank and host), for errors and the hang record.
#pragma once
#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

namespace parallm::comm {

// Every world rank's host name (collective over `world`, once at start).
std::vector<std::string> mpi_gather_hosts(MPI_Comm world);
// Each rank of `group`: its world rank and host ("" where unknown).
std::vector<std::pair<int, std::string>> mpi_places(MPI_Comm group, const std::vector<std::string>& world_hosts);

}  // namespace parallm::comm
