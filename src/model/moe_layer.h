// A mixture-of-experts layer in place of a block's MLP (docs/moe.md):
//   z = x Wr^T; each token's top_k experts by score (+ bias), weights w
//   out = sum_j w_j down_e(silu(gate_e(x)) * up_e(x)) + shared(x)
// and the routing's balancing terms, whose gradients join the router's:
//   aux = aux_coef * E / (K Ng^2) * sum_e count_e * sum_t P_te   (Ng: the global micro-batch's tokens)
//   z   = z_coef * mean_t logsumexp(z_t)^2
//
// The tokens are routed on the host from the kernel's choices: each
// expert's rows in token order (a permutation of the N x K choices), so the
// experts run as one matrix product each over their rows (the grouped
// product), and every layout routes every token to the same experts.
// Counts for the balancing loss are summed over the ranks that split the
// micro-batch (BlockEnv::data: data x context parallel) in every training
// pass, empty or not, so no rank ever waits on one that has no tokens.
// (The layer owns that group, as the attention owns its context exchange.)
//
// Under tensor parallelism every rank routes the whole rows alike and holds
// its columns of every expert (and of the shared experts): the combined
// output is a partial sum reduced like a row-parallel linear's, and the
// input gradient the sum of every rank's part, to which the router's (the
// same on every rank) is added once.
//
// Expert parallelism (docs/moe.md): the experts are split over the ep group
// (each rank its E / ep consecutive experts), and each rank's permuted rows
// go to the ranks holding their experts by two all-to-alls, the per-expert
// counts, then the rows (in expert order, so each rank's share is one
// stretch); the receiver runs its experts over the rows it got in expert
// order, and the outputs return the same way. Every rank takes part in both
// exchanges in every pass, with empty messages where it has no rows.
#pragma once
#include <cstdint>

#include "kernels/moe.h"
#include "model/config.h"
#include "model/gpt2_block.h"
#include "model/params.h"

namespace parallm::model {

// The groups an MoE layer communicates over (not owned; null: this rank
// alone): the ranks the micro-batch's tokens are split over (data x context
// parallel), where the routing counts are summed, and the expert-parallel
// group inside them, over which the experts are split.
struct ExpertPart {
  TensorGroup* data = nullptr;
  TensorGroup* ep = nullptr;
  int ep_size() const { return ep ? ep->size() : 1; }
  int ep_rank() const { return ep ? ep->rank() : 0; }
};

class MoeLayer {
 public:
  MoeLayer() = default;
  MoeLayer(const BlockParams& bp, const GPTConfig& cfg, const BlockWidths& w, ExpertPart groups);
  bool active() const { return router_ >= 0; }
  // y = res + dropout(moe(x)) over this rank's rows; x: the MLP's input (this rank's rows).
  template <class A>
  void forward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, A* y, const A* res, const A* x,
               const ParamView<A>& P, const PassShape& f, uint64_t drop_stream) const;
  // dx (this rank's rows, overwritten) from dy, the whole rows of d(moe(x));
  // every weight gradient is computed here (a split backward's weight half has none left).
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, A* dx, const A* dy, const A* x,
                const ParamView<A>& P, const GradView& G, const PassShape& f) const;
  // The slots' offsets, for the gradient-ready reports.
  void report(const BlockEnv& e, const StepContext& ctx) const;

 private:
  int64_t router_ = -1, bias_ = -1, gate_ = -1, up_ = -1, down_ = -1;  // slots
  int64_t sgate_ = -1, sup_ = -1, sdown_ = -1;                         // the shared experts' (-1: none)
  int64_t E_ = 0, K_ = 0, F_ = 0, S_ = 0, C_ = 0;  // experts, top-k, this rank's expert and shared widths
  kernels::MoeRouting routing_;
  double capacity_ = 0;  // model.moe_capacity_factor (0: dropless)
  float aux_coef_ = 0, z_coef_ = 0;
  TensorGroup* data_ = nullptr;
  TensorGroup* ep_ = nullptr;  // null: every expert here
  int64_t El_ = 0;             // the experts on this rank (E / ep)
  // The permutation of this pass's choices (host), and the counts summed
  // over the data group where training (into the tally's layer l): returns the global token count.
  template <class A>
  double route(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const LayerActs::Moe& m,
               const PassShape& f) const;
  // This rank's experts over their rows xe (expert order, each expert's first row at off[x]), into ye.
  template <class A>
  void experts_forward(const kernels::ModelOps<A>& k, const BlockEnv& e, const LayerActs::Moe& m, const ParamView<A>& P,
                       const int32_t* off, A* ye) const;
  template <class A>
  void experts_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, const LayerActs::Moe& m,
                        const ParamView<A>& P, const GradView& G, const int32_t* off, const A* dyp, A* dxp) const;
  // Choices into expert order (off, slot: -1 dropped, src), every choice counted per expert into counts; with
  // `drop`, each sequence of T rows keeps at most the capacity's choices per expert. Returns the kept rows.
  int32_t permute(const int32_t* ids, int64_t N, int64_t T, bool drop, int32_t* off, int32_t* slot, int32_t* src,
                  float* counts) const;
  // Expert parallel: the counts exchange (forward: fills the layer's counts
  // received; backward reuses them), the rows' offsets by local expert, and
  // the reorderings of the rows received between source-rank order and
  // expert order (on the device; recomputed in backward, as one buffer serves
  // every layer). Messages are rows of C.
  struct Exchange {
    int64_t send[kMaxExperts], recv[kMaxExperts];  // elements per rank of the group
    int32_t off[kMaxExperts + 1];                  // the local experts' first rows, in expert order
    const int32_t *to_expert, *to_source;          // device: row r of one order is row idx[r] of the other
  };
  Exchange exchange(const BlockEnv& e, const LayerActs::Moe& m, bool forward) const;
  // out (in expert order) from this rank's permuted rows in: sent to their
  // experts' ranks, received in source order into tmp, reordered.
  template <class A>
  void dispatch(const kernels::ModelOps<A>& k, const Exchange& x, const A* in, A* tmp, A* out) const;
  // The way back: rows in expert order to their senders, into out (this rank's permuted rows).
  template <class A>
  void undispatch(const kernels::ModelOps<A>& k, const Exchange& x, const A* in, A* tmp, A* out) const;
};

}  // namespace parallm::model
