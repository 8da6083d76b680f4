// What the ranks of a group answer when one of them, on a timeout, asks
// "what are you doing?" (the mpi backend's diagnose): the answer's fields,
// every rank's state for the hang record, and the sentence the error carries.
// No MPI here: the backend sends and receives the answers.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "comm/hang_record.h"

namespace parallm::comm {

constexpr int kStatusFields = 5;
// {last completed collective, the one in progress (0: none), its kind (-1: none), its count, the completed one's kind}
using StatusAnswer = std::array<int64_t, kStatusFields>;
StatusAnswer status_answer(uint64_t done, OpKind done_kind, uint64_t seq, OpKind kind, int64_t count);

// Each group rank's world rank and host ("" where unknown), by group rank.
using Places = std::vector<std::pair<int, std::string>>;

// Every rank of a group of `size`: `me` from `mine`, the others from what they answered (`got`, by group rank;
// missing: did not answer).
std::vector<PeerState> peer_states(int size, int me, const StatusAnswer& mine, const std::map<int, StatusAnswer>& got,
                                   const Places& places);
// "rank 2 is in all_reduce #7 (8 elements); ranks 1,3 on host h1 did not answer within 1.0 s (...); rank 0 waiting
// in the same operation": the peers of `me` as they answered about operation `seq` within `budget_s`.
std::string describe_answers(uint64_t seq, int size, int me, const std::map<int, StatusAnswer>& got,
                             const Places& places, double budget_s);
// "ranks 1,3 on host h1 did not answer within 1.0 s (stopped, dead, or stuck outside communication: ...)".
std::string silence_text(const std::vector<int>& silent, const Places& places, double budget_s);
// "rank 3" or "ranks 1,2".
std::string rank_list(const std::vector<int>& ranks);

}  // namespace parallm::comm
