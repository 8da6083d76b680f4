// Where each rank of an MPI job runs: the world's host names gathered once,
// and the hosts of some ranks of a group named for an error message.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

namespace parallm::comm {

// Every world rank's host name (collective over `world`, once at start).
std::vector<std::string> mpi_gather_hosts(MPI_Comm world);
// " on host h" or " on hosts a, b": where `ranks` of `group` run ("" where unknown).
std::string mpi_hosts_of(MPI_Comm group, const std::vector<std::string>& world_hosts, const std::vector<int>& ranks);

}  // namespace parallm::comm
