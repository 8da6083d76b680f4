#include "model/pass_graphs.h"

#include "core/log.h"

namespace parallm::model {

void PassGraphs::run(const Key& key, const std::function<void()>& queue) {
  if (!failure_.empty()) return queue();
  Entry* e = nullptr;
  for (Entry& g : graphs_)
    if (g.key == key) e = &g;
  if (!e) {  // first seen: eagerly, so that what the pass sets up once is done outside any capture
    if (graphs_.size() < static_cast<size_t>(kMaxGraphs)) graphs_.push_back({key, nullptr});
    return queue();
  }
  if (!e->graph) {
    auto g = std::make_unique<gpu::Graph>();
    const std::string why = g->capture(queue);
    if (!why.empty()) {
      failure_ = why;
      graphs_.clear();  // the graphs made so far are dropped: every pass runs the same way from now on
      log::warn("CUDA graphs off from here (train.cuda_graphs): capturing a {} pass ({} x {}) failed: {}",
                key.backward ? "backward" : "forward", key.B, key.T, why);
      return queue();  // nothing of it ran: run it eagerly
    }
    e->graph = std::move(g);
  }
  e->graph->launch();
  ++launches_;
}

}  // namespace parallm::model
