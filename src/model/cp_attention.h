// Context-parallel attention (issue 36): the attention of a layer whose
// sequence is split over a ContextGroup, as the model's block passes call it
// in place of the unsplit kernel. Two exchanges (parallel.cp_kind):
//
//   ring: each rank keeps its queries; the packed K|V blocks of every rank
//     pass around the ring, the next block in flight while the current one
//     is computed, and each block's result is merged into the running output
//     by the log-sum-exp rule (kernels/attention.h's block kernels). Backward
//     passes the K|V blocks around again together with a travelling fp32
//     dK|dV accumulator that arrives home after C hops (each hop in flight
//     while the next step is computed). With the zigzag split
//     every rank computes the same number of score entries.
//   ulysses: an all-to-all turns [B, T/C, heads] into [B, T, heads/C], the
//     unsplit kernel runs on whole sequences of T/C of the heads, and a second
//     all-to-all turns the output back; backward mirrors it.
// Messages per layer (docs/context_parallel.md asserts them): ring forward
// C-1 sends and receives of B Tl 2Cl elements, backward C-1 of those plus C
// of the fp32 accumulator; ulysses 2 all-to-alls each way.
#pragma once
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "kernels/attention.h"
#include "model/context_group.h"

namespace parallm::kernels {
template <class A>
struct ModelOps;
}  // namespace parallm::kernels

namespace parallm::model {

// The blocks a rank computes at ring step s, holding the K|V of rank
// src = rank - s: each of its query runs against each visible key run of
// src's, in this order (forward and backward alike).
struct RingStep {
  struct Block {
    CpRun q, k;
    int qi = 0;  // which of this rank's runs q is
  };
  Block block[4];
  int n = 0, src = 0;
  const Block* begin() const { return block; }
  const Block* end() const { return block + n; }
};

class CpAttention {
 public:
  static RingStep ring_step(const CpLayout& l, int64_t T, int s);
  // `n_head`: the whole model's heads (the dropout masks' head index).
  CpAttention(ContextGroup& group, const ContextPart& part, int64_t n_head);
  const CpLayout& layout() const { return layout_; }

  // The buffers a pass of [B, Tl] local rows with Cl attention columns and
  // NHl heads (this tensor-parallel rank's) needs: scratch elements of the
  // compute type, the extra activation per layer (ulysses keeps the head-form
  // output), and kernel workspace floats.
  static int64_t scratch_elems(const CpLayout& l, int64_t B, int64_t Tl, int64_t Cl);
  static int64_t head_out_elems(const CpLayout& l, int64_t B, int64_t Tl, int64_t Cl);
  static int64_t workspace_floats(const CpLayout& l, Device dev, int64_t B, int64_t Tl, int64_t Cl, int64_t NHl,
                                  int threads, bool lowp);

  // Forward: out [B, Tl, Cl] and lse (B NHl Tl floats) from qkv [B, Tl, 3Cl].
  // Ulysses rewrites qkv in head form and fills out_h [B, T, Cl/C] (both
  // kept for backward); the ring leaves qkv alone (out_h unused).
  template <class A>
  void forward(const kernels::ModelOps<A>& k, A* out, float* lse, A* qkv, A* out_h, int64_t B, int64_t Tl, int64_t Cl,
               int64_t NHl, kernels::AttnDropout drop, float* ws, A* scratch);
  // Backward: dqkv [B, Tl, 3Cl] (overwritten) from dout [B, Tl, Cl] and what forward kept.
  template <class A>
  void backward(const kernels::ModelOps<A>& k, A* dqkv, const A* dout, const A* qkv, const A* out, const A* out_h,
                const float* lse, int64_t B, int64_t Tl, int64_t Cl, int64_t NHl, kernels::AttnDropout drop, float* ws,
                A* scratch);

  // Thread CPU seconds spent in the ring's block kernels since construction
  // (the causal-balance measurement; with one thread per rank this is the
  // rank's attention work, not the time it waited), in total and per ring
  // step: forward steps 0 .. C-1, then backward steps 0 .. C-1.
  double block_cpu_seconds() const;
  const std::vector<double>& step_cpu_seconds() const { return step_cpu_s_; }

 private:
  ContextGroup& g_;
  CpLayout layout_;
  int64_t n_head_;
  std::vector<double> step_cpu_s_;  // 2C entries for a ring, else none
  kernels::AttnDropout ulysses_drop(kernels::AttnDropout d, int64_t NHl) const;
  void ring_forward(const kernels::ModelOps<float>& k, float* out, float* lse, const float* qkv, int64_t B, int64_t Tl,
                    int64_t Cl, int64_t NHl, const kernels::AttnDropout& drop, float* ws, float* scratch);
  void ring_backward(const kernels::ModelOps<float>& k, float* dqkv, const float* dout, const float* qkv,
                     const float* out, const float* lse, int64_t B, int64_t Tl, int64_t Cl, int64_t NHl,
                     const kernels::AttnDropout& drop, float* ws, float* scratch);
};

}  // namespace parallm::model
