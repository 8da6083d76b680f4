// Host names of an MPI job's ranks (mpi_hosts.h).
#include "comm/mpi_hosts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "comm/topology.h"
#include "core/error.h"

namespace parallm::comm {

std::vector<std::string> mpi_gather_hosts(MPI_Comm world) {
  constexpr int kHost = 64;
  int n = 0;
  MPI_Comm_size(world, &n);
  std::array<char, kHost> mine{};
  std::strncpy(mine.data(), this_host().c_str(), kHost - 1);
  std::vector<char> all(static_cast<size_t>(n) * kHost);
  PARALLM_CHECK(MPI_Allgather(mine.data(), kHost, MPI_CHAR, all.data(), kHost, MPI_CHAR, world) == MPI_SUCCESS,
                CommError, "comm.mpi", "gathering the ranks' host names failed");
  std::vector<std::string> hosts;
  for (int p = 0; p < n; ++p) hosts.emplace_back(all.data() + static_cast<size_t>(p) * kHost);
  return hosts;
}

namespace {
std::vector<int> world_ranks(MPI_Comm group, const std::vector<int>& ranks) {
  MPI_Group g = MPI_GROUP_NULL, w = MPI_GROUP_NULL;
  MPI_Comm_group(group, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  std::vector<int> wr(ranks.size());
  MPI_Group_translate_ranks(g, static_cast<int>(ranks.size()), ranks.data(), w, wr.data());
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  return wr;
}

std::string host_of(const std::vector<std::string>& world_hosts, int world_rank) {
  return world_rank >= 0 && world_rank < static_cast<int>(world_hosts.size())
             ? world_hosts[static_cast<size_t>(world_rank)]
             : std::string();
}
}  // namespace

std::map<int, StatusAnswer> mpi_ask_peers(MPI_Comm ctrl, uint64_t seq, double budget_s,
                                          const std::function<void()>& meanwhile) {
  int n = 0, me = 0;
  MPI_Comm_size(ctrl, &n);
  MPI_Comm_rank(ctrl, &me);
  std::vector<MPI_Request> reqs;
  const int64_t q = static_cast<int64_t>(seq);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    reqs.emplace_back();
    MPI_Isend(&q, 1, MPI_INT64_T, p, kTagStatusReq, ctrl, &reqs.back());
  }
  std::map<int, StatusAnswer> got;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget_s);
  while (static_cast<int>(got.size()) < n - 1 && std::chrono::steady_clock::now() < until) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kTagStatusRep, ctrl, &flag, &st);
    if (flag) {
      StatusAnswer rep{};
      MPI_Recv(rep.data(), kStatusFields, MPI_INT64_T, st.MPI_SOURCE, kTagStatusRep, ctrl, MPI_STATUS_IGNORE);
      got[st.MPI_SOURCE] = rep;
    } else {
      if (meanwhile) meanwhile();
      sched_yield();
    }
  }
  for (MPI_Request& r : reqs)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  return got;
}

Places mpi_places(MPI_Comm group, const std::vector<std::string>& world_hosts) {
  int n = 0;
  MPI_Comm_size(group, &n);
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) ranks[static_cast<size_t>(p)] = p;
  Places out;
  for (int x : world_ranks(group, ranks)) out.emplace_back(x == MPI_UNDEFINED ? -1 : x, host_of(world_hosts, x));
  return out;
}

}  // namespace parallm::comm
