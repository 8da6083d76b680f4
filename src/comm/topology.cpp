#include "comm/topology.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace parallm::comm {

std::string this_host() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

Topology topology_from_hosts(const std::vector<std::string>& hosts) {
  Topology t;
  t.size = static_cast<int>(hosts.size());
  std::map<std::string, int> node_of;
  std::vector<int> count;
  for (int r = 0; r < t.size; ++r) {
    auto [it, fresh] = node_of.emplace(hosts[r], static_cast<int>(t.nodes.size()));
    if (fresh) {
      t.nodes.push_back(hosts[r]);
      count.push_back(0);
    }
    RankPlace p;
    p.rank = r;
    p.node = it->second;
    p.local_rank = count[p.node]++;
    p.host = hosts[r];
    t.ranks.push_back(p);
  }
  for (RankPlace& p : t.ranks) p.local_size = count[p.node];
  return t;
}

Topology discover_topology(Communicator& world, const std::string& host) {
  constexpr int kLen = 64;  // int32 words per name: 255 characters and a terminator
  const std::string me = host.empty() ? this_host() : host;
  const int n = world.size();
  Tensor mine = Tensor::empty({kLen}, DType::I32), all = Tensor::empty({int64_t{kLen} * n}, DType::I32);
  std::memset(mine.raw(), 0, kLen * 4);
  std::memcpy(mine.raw(), me.data(), std::min<size_t>(me.size(), kLen * 4 - 1));
  world.all_gather(mine, all);
  std::vector<std::string> hosts(n);
  const char* base = static_cast<const char*>(all.raw());
  for (int r = 0; r < n; ++r) hosts[r] = std::string(base + static_cast<size_t>(r) * kLen * 4);
  return topology_from_hosts(hosts);
}

std::string dist_info(const Topology& t, const std::string& backend, const std::string& device,
                      const std::vector<std::string>& rank_notes) {
  const int m = static_cast<int>(t.nodes.size());
  int lo = t.size, hi = 0;
  for (const RankPlace& p : t.ranks) {
    lo = std::min(lo, p.local_size);
    hi = std::max(hi, p.local_size);
  }
  std::string hosts;
  for (int k = 0; k < m && k < 16; ++k) hosts += (k ? ", " : "") + t.nodes[k];
  if (m > 16) hosts += fmt::format(", ... ({} more)", m - 16);
  std::string s = fmt::format("dist: world size {}, {} node{}, {} rank{} per node, backend {}, device {}\n", t.size, m,
                              m == 1 ? "" : "s", lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi),
                              hi == 1 ? "" : "s", backend, device);
  s += fmt::format("dist: hosts {}\n", hosts);
  // Thousands of ranks would drown the log: the first and last 32 are enough to see the pattern.
  for (const RankPlace& p : t.ranks) {
    if (t.size > 64 && p.rank == 32) s += fmt::format("dist: ... ({} ranks)\n", t.size - 64);
    if (t.size > 64 && p.rank >= 32 && p.rank < t.size - 32) continue;
    s += fmt::format("dist: [rank {}/{}][local_rank {}][node {}/{}][{}]{}\n", p.rank, t.size, p.local_rank, p.node, m,
                     p.host, p.rank < static_cast<int>(rank_notes.size()) ? rank_notes[p.rank] : "");
  }
  return s;
}

}  // namespace parallm::comm
