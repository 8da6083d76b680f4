// What each rank contributes to a checkpoint (issue 45's one checkpoint path).
// A checkpoint holds the whole model (the one-rank layout), so it loads at
// any layout; every layout says the same thing about its share: a list of
// runs of the whole tensors [flat, flat + count), each with the file (the
// writer) that holds it, and for each run the data on its writer. One writer
// (train/checkpoint/checkpoint.h, write_checkpoint) walks the runs for the parameters,
// then the first and then the second AdamW moments, asking every rank for
// each run in the same order (so a share may communicate in it), and writes
// what its writers get; the manifest follows from the runs alone.
// The layouts' shares (the parallel plan picks one, plan.h):
//   whole_on_one     one rank holds the whole tensors (the files model.bin and
//                    optim.bin, format 3);
//   gathered_whole   a replicated model held in parts (tensor x pipeline):
//                    gathered whole on the group's rank 0 first;
//   own_shards       ZeRO: every rank writes its own pieces of every layout
//                    group (shard-RRRRR-of-NNNNN.bin, format 4);
//   assembled_groups whole layout groups assembled one at a time on their
//                    writer (ZeRO x tensor parallel: zero_tp_groups), so no
//                    rank holds more than a whole group besides what it trains
//                    with.
// A share points into the buffers and layouts it was made from: write it
// before they change.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/params.h"
#include "parallel/grad_sync.h"

namespace parallm::parallel {

enum class StatePart { Params, M, V };  // the parameters, AdamW's first and second moments

// Flat elements [flat, flat + count) of the whole layout, in writer `writer`'s file.
struct StateRun {
  int writer = 0;
  int64_t flat = 0, count = 0;
};

struct CheckpointShare {
  int writers = 1;             // files (one writer each)
  int writer = -1;             // this rank's writer index; -1: writes no file
  bool whole_files = false;    // one writer holding every element in order: model.bin + optim.bin
  std::vector<StateRun> runs;  // the same on every rank; a writer's file holds its runs in this order, per part
  // Run k of `part`: its count floats on the run's writer, nullptr on every
  // other rank (valid until the next call). Every rank calls it for every
  // part and run, in order (it may communicate).
  std::function<const float*(StatePart part, size_t k)> data;
  std::shared_ptr<void> keep;  // buffers the share holds
};

// This rank's buffers of its layout (host floats: the parameters, m, v).
struct StateBuffers {
  const float *params = nullptr, *m = nullptr, *v = nullptr;
};

// `here`: the one writer, holding the whole tensors of `total` floats.
CheckpointShare whole_on_one(bool here, StateBuffers whole, int64_t total);
// The whole model gathered over `group` (the ranks holding one model between
// them) from each rank's `part`, written by the group's rank 0 where
// `writes_group`; the other groups contribute nothing. Collective over
// `group` where `writes_group`.
CheckpointShare gathered_whole(comm::Communicator& group, bool writes_group, const model::ParamLayout& part,
                               const model::ParamLayout& whole, StateBuffers mine);
// ZeRO shards of the data-parallel `group` (whole layout): rank r's buffers
// hold comm::shard_of(group length, n, r) of every layout group, in order.
CheckpointShare own_shards(comm::Communicator& group, const model::ParamLayout& layout, StateBuffers shard);
// Whole layout groups: group g on writer g % writers, filled by
// assemble(part, g, out) on every rank in order (out nullptr but on the writer).
using AssembleGroup = std::function<void(StatePart part, int g, float* out)>;
CheckpointShare assembled_groups(int writer, int writers, const model::ParamLayout& whole, AssembleGroup assemble);

// The ZeRO forms (`local`: the model's parameters and the optimizer's
// moment shards; `sync` holds the shards, over the data-parallel `dp`):
// every rank's own shards (the whole layout);
CheckpointShare zero_shards(comm::Communicator& dp, GradSync& sync, const model::ParamLayout& layout,
                            StateBuffers local);
// with tensor parallelism: each layout group gathered over dp on its rank
// g % dp, whose tp group assembles the whole group on its tp rank 0, the
// group's writer;
CheckpointShare zero_tp_groups(comm::Communicator& dp, comm::Communicator& tp, GradSync& sync,
                               const model::ParamLayout& part, const model::ParamLayout& whole, StateBuffers local);
// a pipeline stage's (ZeRO-1, replicated parameters) or an expert-parallel
// rank's (`ep` > 1, any stage): the moments (stage 3: and the parameters)
// gathered whole on dp rank 0 first (expert parallel: each rank of the first
// ep group its experts' too), then the model over `model_group` (tensor x
// pipeline x ep) as gathered_whole. The writer holds its part whole three times.
CheckpointShare zero_stage_whole(comm::Communicator& dp, comm::Communicator& model_group, GradSync& sync,
                                 const model::ParamLayout& part, const model::ParamLayout& whole, StateBuffers local,
                                 int ep = 1);

}  // namespace parallm::parallel
