// The hang record: when an operation outlives comm.timeout_s, the rank that
// saw it asks its group's ranks what they are doing and writes the answers
// (for each rank: its host, the last collective it completed, the one it is
// in, or that it did not answer) with the operation, the error and where the
// stacks went, to one JSON file per reporting rank. The trainer points it at
// the run's directory (where an operator looks first, beside metrics.jsonl);
// the error message names the file. Written to a temporary name and renamed,
// once per process (the first hang is the telling one).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace parallm::comm {

// One rank of the group as it answered (or did not) when asked.
struct PeerState {
  int rank = 0;         // in the group
  int world_rank = -1;  // -1: unknown
  std::string host;     // "" : unknown
  bool answered = false;
  uint64_t done = 0;  // last completed collective (0: none yet)
  OpKind done_kind = OpKind::Barrier;
  uint64_t seq = 0;  // collective in progress (0: none)
  OpKind kind = OpKind::Barrier;
  int64_t count = 0;
};

struct HangRecord {
  std::string group, operation, error, stacks;
  int rank = 0, size = 0;
  double waited_s = 0, timeout_s = 0;
  std::vector<PeerState> ranks;  // every rank of the group, this one included
};

// Where this process's record goes ("" : nowhere); `hang-<host>-<rank>.json` under a directory by convention.
void set_hang_record_path(const std::string& path);
// Writes the record the first time it is called in this process; returns the path written (later calls: the same
// path, nothing written), "" when no path is set or it cannot be written.
std::string write_hang_record(const HangRecord& record);
// The JSON text of a record (the file's contents).
std::string hang_record_json(const HangRecord& record);

}  // namespace parallm::comm
