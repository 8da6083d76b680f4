#include "comm/topology.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/error.h"

namespace parallm::comm {

EnvLookup process_env() {
  return [](const char* k) -> const char* { return std::getenv(k); };
}

namespace {

// -1 when unset; a ConfigError when set but not a non-negative integer.
int env_int(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (!v || !*v) return -1;
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  PARALLM_CHECK(errno == 0 && *end == '\0' && x >= 0 && x < (1L << 30), ConfigError, "comm.env",
                "{}=\"{}\" is not a rank number", name, v);
  return static_cast<int>(x);
}

struct Scheme {
  const char* source;
  const char *rank, *size, *local_rank, *local_size;
  const char* required;  // only trusted when this one is set too (nullptr: rank suffices)
};

// SLURM_PROCID is also set in a batch script (rank 0 of nothing); only a step
// started by srun has SLURM_STEP_ID together with it.
constexpr Scheme kSchemes[] = {
    {"OMPI_COMM_WORLD", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr},
    {"PALS", "PALS_RANKID", "PMI_SIZE", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE", nullptr},
    {"PMIX", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE", nullptr},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr},
    {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_ID"},
    {"RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", nullptr},
};

}  // namespace

EnvRank env_rank(const EnvLookup& env) {
  for (const Scheme& s : kSchemes) {
    const int rank = env_int(env, s.rank);
    if (rank < 0 || (s.required && !env(s.required))) continue;
    EnvRank r;
    r.source = s.source;
    r.rank = rank;
    r.size = env_int(env, s.size);
    r.local_rank = env_int(env, s.local_rank);
    // SLURM_NTASKS_PER_NODE may read "2(x3)"; only a plain number is taken.
    const char* ls = env(s.local_size);
    r.local_size = ls && std::strchr(ls, '(') ? -1 : env_int(env, s.local_size);
    PARALLM_CHECK(r.size < 0 || r.rank < r.size, ConfigError, "comm.env", "{}={} is not below {}={}", s.rank, r.rank,
                  s.size, r.size);
    return r;
  }
  return {};
}

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
