#include "parallel/pipeline_stages.h"

#include <numeric>

#include "core/error.h"

namespace parallm::parallel {

std::vector<int64_t> stage_layer_counts(int64_t n_layer, int stages, const std::vector<int64_t>& counts) {
  PARALLM_CHECK(stages >= 1 && n_layer >= stages, ConfigError, "config",
                "parallel.pp x parallel.pp_virtual = {} pipeline stages for model.n_layer={} layers: every stage "
                "needs at least one layer; use at most {} stages",
                stages, n_layer, n_layer);
  if (counts.empty()) {
    std::vector<int64_t> even(static_cast<size_t>(stages), n_layer / stages);
    for (int64_t s = 0; s < n_layer % stages; ++s) ++even[static_cast<size_t>(s)];
    return even;
  }
  PARALLM_CHECK(static_cast<int64_t>(counts.size()) == stages, ConfigError, "config",
                "parallel.pp_layers gives {} counts, but the pipeline has parallel.pp x parallel.pp_virtual = {} "
                "stages: give one count per stage",
                counts.size(), stages);
  for (size_t s = 0; s < counts.size(); ++s)
    PARALLM_CHECK(counts[s] >= 1 && counts[s] <= n_layer, ConfigError, "config",
                  "parallel.pp_layers: stage {} gets {} layers; every stage needs at least one and the model has {}", s,
                  counts[s], n_layer);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  PARALLM_CHECK(total == n_layer, ConfigError, "config",
                "parallel.pp_layers covers {} layers, but model.n_layer={}: the counts must add up to the layers "
                "(each layer in exactly one stage)",
                total, n_layer);
  return counts;
}

std::vector<model::LayerRange> stage_chunks(int64_t n_layer, int p, int v, int rank,
                                            const std::vector<int64_t>& counts) {
  const std::vector<int64_t> per = stage_layer_counts(n_layer, p * v, counts);
  std::vector<model::LayerRange> out;
  int64_t begin = 0;
  for (int s = 0; s < p * v; ++s) {
    const int64_t end = begin + per[static_cast<size_t>(s)];
    if (s % p == rank) out.push_back({begin, end});
    begin = end;
  }
  return out;
}

}  // namespace parallm::parallel
