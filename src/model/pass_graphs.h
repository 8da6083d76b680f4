// CUDA graphs of a model's training passes (train.cuda_graphs). A pass's
// kernels are queued by host code that, for a static shape and context, queues
// the same kernels with the same arguments and pointers every micro-step; a
// graph captures them once and replays them, so the host's per-kernel launch
// cost is paid once per pass instead of once per kernel. Each pass is keyed by
// what changes its kernels (forward or backward, shape, activation set, loss
// scale, whether backward recomputes the last block): the first pass of a key
// runs eagerly (lazy setup, plans, the rope table's upload, the caching
// allocator's blocks), the second is captured and launched, later ones are
// launched. What must stay outside a capture stays with the caller: the
// batch's upload and checks, the losses' copy back, host bookkeeping. A capture
// that fails (an unsupported call, a host wait inside the pass) logs why once
// and every later pass runs eagerly. The model decides which passes qualify
// (GPT::graph_refusal, StepContext::graphs).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/gpu.h"

namespace parallm::model {

class PassGraphs {
 public:
  struct Key {
    int backward = 0, chunk = 0, set = 0;
    int64_t B = 0, T = 0;
    float loss_scale = 0;
    int fresh = 0;  // backward: the last block's activations still in the recompute buffers
    auto tie() const { return std::tie(backward, chunk, set, B, T, loss_scale, fresh); }
    bool operator==(const Key& o) const { return tie() == o.tie(); }
  };
  static constexpr int kMaxGraphs = 8;  // keys beyond run eagerly

  // Runs the pass that `queue` queues on the compute stream: eagerly, captured and launched, or launched. A
  // template, so that a pass replayed every micro-step wraps its callable in nothing (the capture's std::function
  // holds a reference, once).
  template <class F>
  void run(const Key& key, F&& queue) {
    Entry* e = find_or_add(key);
    if (!e) return queue();  // first seen, too many keys, or capturing failed: eagerly
    if (!e->graph && !capture(*e, std::function<void()>(std::ref(queue)))) return queue();  // nothing of it ran
    e->graph->launch();
    ++launches_;
  }

  int64_t launches() const { return launches_; }  // passes run from a graph (captures included)
  int captured() const {
    int n = 0;
    for (const Entry& e : graphs_) n += e.graph ? 1 : 0;
    return n;
  }
  const std::string& failure() const { return failure_; }  // why capturing stopped ("" while it works)

 private:
  struct Entry {
    Key key;
    std::unique_ptr<gpu::Graph> graph;  // null: seen once, not captured yet
  };
  // The key's entry, or null where the pass runs eagerly: a key seen for the first time (it is added: what the
  // pass sets up once is done outside any capture), one beyond kMaxGraphs, or any after a failed capture.
  Entry* find_or_add(const Key& key);
  // Captures the entry's graph; false (and from now on every pass eager) where that fails.
  bool capture(Entry& e, const std::function<void()>& queue);
  std::vector<Entry> graphs_;
  std::string failure_;
  int64_t launches_ = 0;
};

}  // namespace parallm::model
