// Which layers each pipeline stage holds: the model's n_layer layers cut into
// p x V virtual stages (V chunks per rank, virtual stage c * p + r on rank r,
// as the schedules in pipeline_schedule.h number them), by the counts the
// user gives (parallel.pp_layers) or as evenly as the layers allow (the
// first n_layer % stages virtual stages one layer more: the last stage also
// computes the head and the loss). Every layer in exactly one stage, none
// empty: anything else is a ConfigError saying which.
#pragma once
#include <cstdint>
#include <vector>

#include "model/params.h"

namespace parallm::parallel {

// Layers per virtual stage (`counts` checked, or the even split when empty).
std::vector<int64_t> stage_layer_counts(int64_t n_layer, int stages, const std::vector<int64_t>& counts);

// Rank `rank`'s chunks (its p ranks x v chunks' virtual stages) as layer ranges, in order.
std::vector<model::LayerRange> stage_chunks(int64_t n_layer, int p, int v, int rank,
                                            const std::vector<int64_t>& counts);

}  // namespace parallm::parallel
