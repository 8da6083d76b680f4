// The peers' answers on a timeout (peer_status.h).
#include "comm/peer_status.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace parallm::comm {

StatusAnswer status_answer(uint64_t done, OpKind done_kind, uint64_t seq, OpKind kind, int64_t count) {
  return {static_cast<int64_t>(done), static_cast<int64_t>(seq), seq ? static_cast<int64_t>(kind) : -1, seq ? count : 0,
          static_cast<int64_t>(done_kind)};
}

std::vector<PeerState> peer_states(int size, int me, const StatusAnswer& mine, const std::map<int, StatusAnswer>& got,
                                   const Places& places) {
  std::vector<PeerState> out(static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) {
    PeerState& s = out[static_cast<size_t>(p)];
    s.rank = p;
    if (p < static_cast<int>(places.size())) std::tie(s.world_rank, s.host) = places[static_cast<size_t>(p)];
    const auto it = got.find(p);
    if (p != me && it == got.end()) continue;
    const StatusAnswer& r = p == me ? mine : it->second;
    s.answered = true;
    s.done = static_cast<uint64_t>(r[0]);
    s.seq = static_cast<uint64_t>(r[1]);
    s.kind = r[1] ? static_cast<OpKind>(r[2]) : OpKind::Barrier;
    s.count = r[3];
    s.done_kind = static_cast<OpKind>(r[4]);
  }
  return out;
}

namespace {
// " on host h" or " on hosts a, b": where `ranks` run ("" where unknown).
std::string hosts_of(const Places& places, const std::vector<int>& ranks) {
  std::vector<std::string> h;
  for (int r : ranks)
    if (r < static_cast<int>(places.size())) {
      const std::string& host = places[static_cast<size_t>(r)].second;
      if (!host.empty() && std::find(h.begin(), h.end(), host) == h.end()) h.push_back(host);
    }
  if (h.empty()) return "";
  return fmt::format(" on host{} {}", h.size() == 1 ? "" : "s", fmt::join(h, ", "));
}
}  // namespace

std::string describe_answers(uint64_t seq, int size, int me, const std::map<int, StatusAnswer>& got,
                             const Places& places, double budget_s) {
  std::vector<int> waiting, silent;
  std::vector<std::string> others;
  for (int p = 0; p < size; ++p) {
    if (p == me) continue;
    const auto it = got.find(p);
    if (it == got.end()) {
      silent.push_back(p);
      continue;
    }
    const StatusAnswer& r = it->second;
    if (r[1] == static_cast<int64_t>(seq))
      waiting.push_back(p);
    else if (r[1] == 0)
      others.push_back(fmt::format("rank {} is idle after collective #{}", p, r[0]));
    else
      others.push_back(
          fmt::format("rank {} is in {} #{} ({} elements)", p, op_kind_name(static_cast<OpKind>(r[2])), r[1], r[3]));
  }
  std::string s;
  for (const auto& o : others) s += (s.empty() ? "" : "; ") + o;
  if (!silent.empty()) s += (s.empty() ? "" : "; ") + silence_text(silent, places, budget_s);
  if (!waiting.empty()) s += (s.empty() ? "" : "; ") + rank_list(waiting) + " waiting in the same operation";
  return s;
}

std::string silence_text(const std::vector<int>& silent, const Places& places, double budget_s) {
  return fmt::format(
      "{}{} did not answer within {:.1f} s (stopped, dead, or stuck outside communication: look at that process)",
      rank_list(silent), hosts_of(places, silent), budget_s);
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
}

}  // namespace parallm::comm
