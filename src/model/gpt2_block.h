// GPT-2's transformer block: pre-LayerNorm attention and a GELU MLP, each a
// residual branch with dropout, built from the layers of layers.h. The first
// block kind of a model spec; another family (RMSNorm, SwiGLU, grouped-query
// attention) adds its own kind beside it with the same passes.
//
// A block holds its layers (their slots' flat offsets and this rank's widths);
// what its passes use beside them comes from the model in a BlockEnv: the
// activation buffers (its own by layer index, the shared scratch), the tensor
// split its linear layers share, and how gradients are reported final.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "kernels/gelu.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/params.h"
#include "model/vocab_layers.h"

namespace parallm::model {

// Dropout sites of a layer, for the RNG stream of each mask.
enum DropoutSite : uint64_t { kAttnProbs = 0, kAttnResid = 1, kMlpResid = 2, kEmbed = 3 };

struct BlockEnv {
  Activations& acts;
  const TensorSplit& split;
  const kernels::Ops& fp32;  // fp32 kernels (sums of partial LayerNorm gradients)
  Device dev;
  const ParamLayout* layout;  // slots' units, for the gradient-ready reports
  kernels::GeluKind gelu;
  Recompute recompute;
  void copy(void* dst, const void* src, size_t bytes) const;
  // Reports parameters (by flat offset; -1 = absent) whose gradients are final (ctx.grads_ready).
  void ready(const StepContext& ctx, std::initializer_list<int64_t> offsets) const;
};

// What every block kind's backward shares: the scratch buffers, each
// dropout site's stream, the gradient through a residual branch's dropout,
// and the linear layers' output gradients kept for a split backward's weight half.
template <class A>
struct BackwardScratch {
  const BlockEnv& e;
  const PassShape& f;
  int64_t l;
  bool split;  // a split backward's input half (G hides the weight gradients)
  A* dtmp = e.acts.template scr<A>(e.acts.plan().s_tmp);
  A* dbig1 = e.acts.template scr<A>(e.acts.plan().s_dfch);
  A* dbig2 = e.acts.template scr<A>(e.acts.plan().s_dfch2);
  float* ln_stats = e.acts.stat(e.acts.plan().ln_grad);
  uint64_t stream(uint64_t site) const { return stream_id(kRngDropout, f.ctx->micro_step, l, site); }
  // Gradient through a residual branch's dropout: dtmp, or dres itself without dropout.
  const A* through_dropout(const kernels::ModelOps<A>& k, const A* dres, uint64_t site) const {
    if (f.p <= 0) return dres;
    f.dropout_rows(k, true, dtmp, dres, stream(site));
    return dtmp;
  }
  // d, kept in activation `off` for the weight half (a split backward), or d itself.
  const A* keep(int64_t off, const A* d, int64_t n) const {
    if (!split) return d;
    e.copy(e.acts.template act<A>(off), d, static_cast<size_t>(n) * sizeof(A));
    return e.acts.template act<A>(off);
  }
};

class Gpt2Block {
 public:
  Gpt2Block() = default;
  // Block `bp`'s slots; C the residual width, Cl this rank's attention columns.
  Gpt2Block(const BlockParams& bp, int64_t C, int64_t Cl, const Attention& attn);
  // Layer l's passes from its input x with its group's parameters P and
  // gradients G: backward turns d(block output) in dres into d(block input),
  // redoing what recompute dropped where `redo`; the weight half computes the
  // linear layers' weight gradients from what a split backward's input half kept.
  template <class A>
  void forward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
               const PassShape& f) const;
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
                const GradView& G, const PassShape& f, bool redo, A* dres) const;
  template <class A>
  void weight_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const ParamView<A>& P,
                       const GradView& G, const PassShape& f) const;
  // Reports the linear layers' gradients final (after the weight half).
  void report_linear(const BlockEnv& e, const StepContext& ctx) const {
    const Layers& b = layers_;
    e.ready(ctx, {b.fcproj.w, b.fcproj.b, b.fc.w, b.fc.b, b.proj.w, b.proj.b, b.qkv.w, b.qkv.b});
  }

 private:
  struct Layers {
    LayerNorm ln1, ln2;
    ColumnLinear qkv, fc;
    Attention attn;
    RowLinear proj, fcproj;
  };
  Layers layers_;
};

}  // namespace parallm::model
