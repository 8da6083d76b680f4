// Where ranks run: what the ranks find out together once the world is up
// (what the launcher's environment says before is comm/launch_env.h).
//
// Design: the placement (node, local rank) is not taken from the
// environment but computed from the host names all ranks exchange, so it is
// right under every launcher, including none.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/launch_env.h"

namespace parallm::comm {

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
