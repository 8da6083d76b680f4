// What a pass over the model's layers carries: the micro-step's context
// (StepContext: training or not, the dropout stream, the loss scale, the
// gradient hook) and the pass's shape (PassShape: B, T, the rows this rank
// holds, where its positions lie in the whole sequence). Layers read both and
// nothing else of the model: a layer never asks how the run is laid out.
//
// The shape also owns the two things that depend on how positions and rows
// are spread over ranks, so that no layer branches on it: the dropout masks
// over the residual rows (drawn by the global sample, position and channel of
// each element) and the walk over runs of consecutive positions (the whole
// batch at once; context parallel, each sample's runs of the local rows).
#pragma once
#include <cstdint>
#include <functional>

#include "model/cp_layout.h"

namespace parallm::kernels {
template <class A>
struct ModelOps;
}  // namespace parallm::kernels

namespace parallm::model {

class NumericWatch;
class KvCache;

// What varies per micro-step: whether this is training (dropout on, gradients
// wanted) and where the dropout masks come from in the counter-based RNG.
struct StepContext {
  bool train = false;       // dropout active
  bool need_grad = false;   // compute gradients (requires targets)
  uint64_t seed = 0;        // dropout seed
  uint64_t micro_step = 0;  // global micro-step counter: a fresh mask per micro-step
  float loss_scale = 1.0f;  // d(total loss)/d(mean loss of this micro-batch), e.g. 1/gas
  // Called by backward as soon as the gradients of layout unit u (a
  // parameter slot) are final: data parallelism starts communication there.
  std::function<void(int)> grads_ready;
  // Index of this batch's first sample within the micro-step's global batch
  // (rank * B under data parallelism): dropout masks follow the sample, so
  // any split of a global batch over ranks draws the same masks.
  int64_t sample_offset = 0;
  // GPU: forward queues the losses' copy and returns NaN instead of waiting
  // for the GPU; deferred_loss() reads the mean later (before the next forward).
  bool defer_loss = false;
  // The numeric detector (numeric_watch.h; nullptr: off): each layer's
  // tensors are checked after its forward and backward (one test per layer when off).
  NumericWatch* watch = nullptr;
  // The loop lets the model run this training pass from a CUDA graph (pass_graphs.h; GPT::use_cuda_graphs).
  bool graphs = false;
};

// One pass's shape: B, T, N = B*T rows, Nl of them on this rank (sequence
// parallel: N/tp), C channels of the residual stream, the dropout rate and
// the global index of element 0 of this rank's residual rows
// (layout-invariant masks). Context parallel, T is the local length, Tg the
// global one and `runs` where each sample's rows lie in it (drop_base is
// then unused).
struct PassShape {
  int64_t B = 0, T = 0, N = 0, Nl = 0, Tg = 0, C = 0;
  float p = 0;
  uint64_t drop_base = 0;
  bool by_runs = false;  // context parallel: positions in runs
  CpRuns runs;
  // Rotary models: the cos | sin table rows of the pass's T local rows
  // (rope.h; their global positions), on the model's device. Null otherwise.
  const float* rope = nullptr;
  // Generation with a KV cache (kv_cache.h): the pass's rows are one
  // sequence's positions [pos0, pos0 + T), the earlier ones in `cache`.
  int64_t pos0 = 0;
  KvCache* cache = nullptr;
  const StepContext* ctx = nullptr;

  // Dropout (forward or backward) over the pass's Nl x C residual rows, with
  // the masks of their global (sample, position, channel) indices.
  template <class A>
  void dropout_rows(const kernels::ModelOps<A>& k, bool backward, A* out, const A* in, uint64_t stream) const;
  // Calls fn(row, pos, B, T) over the pass's rows in runs of consecutive
  // positions: the whole batch at once (pos 0), or context parallel each
  // sample's runs (local row `row` holds global position `pos`).
  template <class F>
  void for_position_runs(F&& fn) const {
    if (!by_runs) return fn(int64_t{0}, int64_t{0}, B, T);
    for (int64_t b = 0; b < B; ++b)
      for (const CpRun& r : runs) fn(b * T + r.local, r.global, int64_t{1}, r.len);
  }
};

}  // namespace parallm::model
