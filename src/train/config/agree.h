// Every rank of a job must train with the same settings. A launch that gives
// ranks different values (a wrapper script, a per-node config file) used to
// run to the end with different learning rates, batch sizes or seeds, and
// only mismatches that change shapes or the order of collectives were caught.
//
// Design: each rank serializes its resolved RunConfig (RunConfig::to_json(),
// less the keys below), the ranks all-gather those texts (padded to the
// longest), and every rank compares them in the same way, so a mismatch is the
// same ConfigError on every rank: it names each key that differs, its values
// and the ranks holding each. One collective pair at start; nothing per step.
//
// Keys that may differ per rank: where and how one process runs, never what
// is computed.
//   train.threads     cores per node may differ
//   train.progress    only rank 0 draws a progress bar (others turn it off)
//   train.device      cuda:N names each rank's own GPU
//   train.peak_flops  each machine's GEMM peak, for its MFU figure
//   comm.backend      the world already exists ("auto" and "mpi" give the same)
//   comm.timeout_s    how long this rank waits; a timeout ends the job either way
// Everything else must agree, paths included (data.dir, train.out_dir): on
// several nodes, put node-local copies at the same path.
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/config/config.h"

namespace parallm::train {

// The keys above.
const std::set<std::string>& per_rank_keys();

// A collective: every rank of `world` calls it at the same point, before
// anything is written. ConfigError on every rank when the configs differ, e.g.
//   [config] ranks disagree on optimizer.learning_rate: 0.001 on ranks 0, 2;
//   0.002 on rank 1 (every rank must be launched with the same settings)
void check_ranks_agree(const RunConfig& cfg, comm::Communicator& world);

// The message for rank r's config `per_rank[r]` ("" when they all agree).
std::string describe_disagreement(const std::vector<nlohmann::json>& per_rank);

}  // namespace parallm::train
