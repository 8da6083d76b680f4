// Where ranks run: what the launcher's environment says before MPI starts,
// and what the ranks find out together once it has.
//
// Design: the environment is read through a lookup function so tests can
// feed any scheduler's variables. The placement (node, local rank) is not
// taken from the environment but computed from the host names all ranks
// exchange, so it is right under every launcher, including none.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace parallm::comm {

using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_env();  // std::getenv

// A rank's identity as the launcher published it (-1: not given).
struct EnvRank {
  int rank = -1, size = -1, local_rank = -1, local_size = -1;
  std::string source;  // "OMPI_COMM_WORLD", "PMI", "PMIX", "PALS", "SLURM", "RANK", or "" when none
};
// Reads, in order: OMPI_COMM_WORLD_*, PALS_*, PMIX_*, PMI_* (MPI_LOCAL*), SLURM_* (only inside an
// srun step), then RANK/LOCAL_RANK/WORLD_SIZE. Malformed numbers are a ConfigError naming the variable.
EnvRank env_rank(const EnvLookup& env = process_env());

struct RankPlace {
  int rank = 0, node = 0, local_rank = 0, local_size = 1;
  std::string host;
};

struct Topology {
  int size = 1;
  std::vector<std::string> nodes;  // host of each node, in order of first rank
  std::vector<RankPlace> ranks;    // by global rank
  const RankPlace& me(int rank) const { return ranks.at(rank); }
};

// Collective over `world`: gathers every rank's host name (this machine's
// unless given) and numbers nodes by their first rank.
Topology discover_topology(Communicator& world, const std::string& host = "");
// Computes the placement from host names listed by rank (what the collective gathers).
Topology topology_from_hosts(const std::vector<std::string>& hosts);

// The dist info block rank 0 prints at start: world size, nodes, ranks per
// node, hosts, backend, device, then one line per rank
// "[rank r/N][local_rank l][node k/M][host]".
// `rank_notes` (optional, one per rank) ends each rank's line, e.g. its mesh coordinates.
std::string dist_info(const Topology& t, const std::string& backend, const std::string& device,
                      const std::vector<std::string>& rank_notes = {});

std::string this_host();

}  // namespace parallm::comm
