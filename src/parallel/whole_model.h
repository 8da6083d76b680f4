// A model's part (a tensor-parallel rank's shards, a pipeline stage's
// layers) to and from the whole model's layout, which checkpoints hold so
// that they load at any tp and pp: the gathers of the checkpoint writers and
// the slice of the readers. Exact: each element comes from one rank.
#pragma once
#include "comm/communicator.h"
#include "model/params.h"

namespace parallm::parallel {

// Checkpoints hold the whole model (the one-rank layout `whole`), so they
// load at any tp and pp. gather_whole: the whole flat buffer from every rank's
// part (`mine`, host floats of part.total()) into `out` on the group's rank 0
// (others pass nullptr); `tp` is the group holding the whole model between
// its ranks (tensor x pipeline parallel); collective, exact (each element
// comes from one rank: a replicated slot from tp rank 0, the tied table from
// the first stage). Each rank sends its elements (in runs of the whole
// tensor) to rank 0 in turn, so no rank but the root holds more than its part.
// slice_whole: this rank's part of a whole flat buffer.
void gather_whole(comm::Communicator& tp, const model::ParamLayout& part, const model::ParamLayout& whole,
                  const float* mine, float* out);
void slice_whole(const model::ParamLayout& part, const model::ParamLayout& whole, const float* in, float* mine);
// Layout group g of the whole model (`out`, whole.group(g)'s length, on the
// group's rank 0; others pass nullptr) from every rank's group g (`mine`,
// part.group(g)'s length): one gather of the parts (the root holds tp of
// them, about the whole group, besides `out`), replicated slots from rank 0.
// Collective over `tp`, exact.
void gather_whole_group(comm::Communicator& tp, const model::ParamLayout& part, const model::ParamLayout& whole, int g,
                        const float* mine, float* out);

}  // namespace parallm::parallel
