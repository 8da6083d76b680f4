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
#pragma once
#include <cstdint>

#include "kernels/moe.h"
#include "model/config.h"
#include "model/gpt2_block.h"
#include "model/params.h"

namespace parallm::model {

class MoeLayer {
 public:
  MoeLayer() = default;
  // `data`: the ranks the micro-batch's tokens are split over (data x
  // context parallel; not owned, null: this rank alone), where the counts are summed.
  MoeLayer(const BlockParams& bp, const GPTConfig& cfg, const BlockWidths& w, TensorGroup* data);
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
  float aux_coef_ = 0, z_coef_ = 0;
  TensorGroup* data_ = nullptr;
  // The permutation of this pass's choices (host), and the counts summed
  // over the data group where training: returns the global token count.
  template <class A>
  double route(const kernels::ModelOps<A>& k, const BlockEnv& e, const LayerActs::Moe& m, const PassShape& f) const;
  template <class A>
  void experts_forward(const kernels::ModelOps<A>& k, const BlockEnv& e, const LayerActs::Moe& m,
                       const ParamView<A>& P) const;
  template <class A>
  void experts_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, const LayerActs::Moe& m,
                        const ParamView<A>& P, const GradView& G, const A* dyp, A* dxp) const;
};

}  // namespace parallm::model
