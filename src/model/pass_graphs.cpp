#include "model/pass_graphs.h"

#include "core/log.h"

namespace parallm::model {

PassGraphs::Entry* PassGraphs::find_or_add(const Key& key) {
  if (!failure_.empty()) return nullptr;
  for (Entry& g : graphs_)
    if (g.key == key) return &g;
  if (graphs_.size() < static_cast<size_t>(kMaxGraphs)) graphs_.push_back({key, nullptr});
  return nullptr;
}

bool PassGraphs::capture(Entry& e, const std::function<void()>& queue) {
  auto g = std::make_unique<gpu::Graph>();
  const std::string why = g->capture(queue);
  if (why.empty()) {
    e.graph = std::move(g);
    return true;
  }
  failure_ = why;
  log::warn("CUDA graphs off from here (train.cuda_graphs): capturing a {} pass ({} x {}) failed: {}",
            e.key.backward ? "backward" : "forward", e.key.B, e.key.T, why);
  graphs_.clear();  // the graphs made so far are dropped (e with them): every pass runs the same way from now on
  return false;
}

}  // namespace parallm::model
