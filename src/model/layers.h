// The layers a transformer block is built from, each with an explicit forward
// and backward over flat buffers, and each owning the tensor-, sequence- and
// context-parallel communication its kind needs, so a block's code reads as
// the one-rank model and never asks how the run is laid out (picotron's
// ColumnParallelLinear / RowParallelLinear; Megatron's conjugate operators,
// tensor_group.h):
//
//   ColumnLinear  y = x W + b, W split by output columns: its input is the
//                 whole rows of x (sequence parallel: gathered), its input
//                 gradient the sum of every rank's part.
//   RowLinear     y = x W + b, W split by input rows: the partial products are
//                 summed (sequence parallel: reduce-scattered to this rank's
//                 rows), then the bias is added once; then dropout and the
//                 residual add.
//   ColumnLinears several column-parallel linears over one input (q, k, v;
//                 gate, up): one gather of its rows, one sum of their input
//                 gradients.
//   Norm          LayerNorm or RMSNorm over this rank's rows; sequence
//                 parallel, its weight gradients are partial sums, summed
//                 over the group (and so are a per-head QK-norm's, whose rows
//                 are this rank's heads).
//   Attention     the attention kernel over this rank's heads, or the
//                 context-parallel exchange (cp_attention.h).
//
// A layer holds the flat offsets of its parameter slots (the sharding table's,
// params.h) and its widths on this rank; the pass hands it the kernels, the
// pass shape (pass.h) and views of the parameters and gradients of the block's
// group (ParamView, GradView).
#pragma once
#include <cstdint>

#include "core/device.h"
#include "kernels/attention.h"
#include "model/pass.h"
#include "model/tensor_group.h"

namespace parallm::kernels {
struct Ops;
}  // namespace parallm::kernels

namespace parallm::model {

class CpAttention;

// A group's parameters (in the compute type) as the layers read them: the
// parameter at flat offset o is at(o); an absent one (-1) is nullptr.
template <class A>
struct ParamView {
  const A* base = nullptr;
  int64_t begin = 0;  // the flat offset of base[0]
  const A* at(int64_t o) const { return o < 0 ? nullptr : base + (o - begin); }
};
// A group's gradients (fp32), likewise; `weights` false (a split backward's
// input half) hides the linear layers' weight gradients, left to the weight half.
struct GradView {
  float* base = nullptr;
  int64_t begin = 0;
  bool weights = true;
  float* at(int64_t o) const { return o < 0 ? nullptr : base + (o - begin); }
  float* linear(int64_t o) const { return weights ? at(o) : nullptr; }
};

// How the activations of a layer stack are split over its tensor-parallel
// group: not at all (no group), by columns inside the linear layers (tp), and
// with sequence parallelism the residual stream by rows too. Holds the two
// whole-row scratch buffers (N x C each) sequence parallelism gathers into.
class TensorSplit {
 public:
  TensorSplit() = default;
  TensorSplit(TensorGroup* tp, bool sequence_parallel, int64_t C) : tp_(tp), sp_(tp && sequence_parallel), C_(C) {}
  void set_buffers(void* rows, void* grads) {
    rows_ = rows;
    grads_ = grads;
  }
  TensorGroup* group() const { return tp_; }
  bool active() const { return tp_ != nullptr; }
  bool splits_rows() const { return sp_; }
  int size() const { return tp_ ? tp_->size() : 1; }
  int rank() const { return tp_ ? tp_->rank() : 0; }
  // This rank's rows of an N-row pass (N / tp sequence parallel, else N).
  int64_t local_rows(int64_t N) const { return sp_ ? N / tp_->size() : N; }

  // The whole rows of an activation held by rows (sequence parallel: gathered
  // into the rows buffer, `gather`'s forward half); otherwise itself.
  template <class A>
  const A* whole_rows(const A* local, int64_t N) const {
    if (!sp_) return local;
    gather_forward(tp_, local, rows<A>(), local_rows(N) * C_);
    return rows<A>();
  }
  // The whole rows of a gradient held by rows (`scatter`'s backward half),
  // in the gradient buffer; otherwise itself.
  template <class A>
  const A* whole_grad(const A* dlocal, int64_t N) const {
    if (!sp_) return dlocal;
    scatter_backward(tp_, dlocal, grads<A>(), local_rows(N) * C_);
    return grads<A>();
  }
  // Where a column-parallel input gradient's partial sums go before
  // sum_partials() makes `dx` (this rank's rows) of them.
  template <class A>
  A* partial_for(A* dx) const {
    return sp_ ? grads<A>() : dx;
  }
  template <class A>
  void sum_partials(A* dx, int64_t N) const {
    if (sp_)
      gather_backward(tp_, grads<A>(), dx, local_rows(N) * C_);
    else
      copy_backward(tp_, dx, N * C_);
  }
  // Where a row-parallel output's partial sums go before reduce_rows() makes
  // `out` (this rank's rows) of them.
  template <class A>
  A* row_partial_for(A* out) const {
    return sp_ ? grads<A>() : out;
  }
  // A statistic computed from this rank's columns (a partial sum), summed over the group.
  void sum_stat(float* x, int64_t n) const {
    if (tp_) tp_->sum(x, n);
  }
  template <class A>
  void reduce_rows(A* out, int64_t N) const {
    if (sp_)
      scatter_forward(tp_, grads<A>(), out, local_rows(N) * C_);
    else
      reduce_forward(tp_, out, N * C_);
  }

 private:
  template <class A>
  A* rows() const {
    return static_cast<A*>(rows_);
  }
  template <class A>
  A* grads() const {
    return static_cast<A*>(grads_);
  }
  TensorGroup* tp_ = nullptr;
  bool sp_ = false;
  int64_t C_ = 0;
  void* rows_ = nullptr;
  void* grads_ = nullptr;
};

// y [N, out] = x [N, in] W + b with W split by output columns over the group.
struct ColumnLinear {
  int64_t w = -1, b = -1;   // flat offsets (b: -1 without bias)
  int64_t in = 0, out = 0;  // the whole input width, this rank's output columns
  // In a ColumnLinears group: its weight gradients are left to the caller
  // (partial sums to be summed over the group first: a replicated KV head's).
  bool own_grads = false;
  template <class A>
  void forward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* y, const A* x, const ParamView<A>& P,
               int64_t N) const;
  // dx (this rank's rows) = d(input) summed over the group; the weight
  // gradients += unless G hides them (then x is not read).
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* dx, const A* dy, const A* x,
                const ParamView<A>& P, const GradView& G, int64_t N) const;
  // The weight half of a split backward: the weight gradients alone.
  template <class A>
  void weight_backward(const kernels::ModelOps<A>& k, const TensorSplit& s, const A* dy, const A* x,
                       const ParamView<A>& P, const GradView& G, int64_t N) const;
};

// y = res + dropout(x [N, in] W + b) over this rank's rows, W split by input rows.
struct RowLinear {
  int64_t w = -1, b = -1;
  int64_t in = 0, out = 0;  // this rank's input rows, the whole output width
  // `tmp` holds this rank's rows of the product (and its dropout) on return,
  // except where one fused kernel writes y directly (no dropout, one rank).
  template <class A>
  void forward_residual(const kernels::ModelOps<A>& k, const TensorSplit& s, A* y, const A* res, const A* x,
                        const ParamView<A>& P, A* tmp, const PassShape& f, uint64_t drop_stream) const;
  // dy's whole rows (from this rank's rows of d(output)): what backward takes.
  template <class A>
  const A* whole_dy(const TensorSplit& s, const A* dy_local, int64_t N) const {
    return s.whole_grad(dy_local, N);
  }
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* dx, const A* dy, const A* x,
                const ParamView<A>& P, const GradView& G, int64_t N) const;
  template <class A>
  void weight_backward(const kernels::ModelOps<A>& k, const TensorSplit& s, const A* dy, const A* x,
                       const ParamView<A>& P, const GradView& G, int64_t N) const {
    backward<A>(k, s, nullptr, dy, x, P, G, N);
  }
};

// Several column-parallel linears over the same input (Llama's q, k, v and
// gate, up): the input's whole rows gathered once; backward's input gradient
// is their sum, reduced over the group once. `tmp` holds a second input
// gradient of the input's whole rows (N x in) while the sum is made.
struct ColumnLinears {
  static constexpr int kMax = 3;
  ColumnLinear l[kMax];
  int n = 0;
  template <class A>
  void forward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* const* y, const A* x, const ParamView<A>& P,
               int64_t N) const;
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* dx, const A* const* dy, const A* x,
                const ParamView<A>& P, const GradView& G, int64_t N, A* tmp) const;
  template <class A>
  void weight_backward(const kernels::ModelOps<A>& k, const TensorSplit& s, const A* const* dy, const A* x,
                       const ParamView<A>& P, const GradView& G, int64_t N) const;
};

// LayerNorm (GPT-2) or RMSNorm (Llama: no mean, no bias, eps from the
// config) over this rank's Nl rows of C channels.
struct Norm {
  int64_t w = -1, b = -1, C = 0;
  bool rms = false;
  float eps = 0.0f;
  // RMSNorm's statistics are rstd alone (mean unused, may be null).
  template <class A>
  void forward(const kernels::ModelOps<A>& k, A* y, float* mean, float* rstd, const A* x, const ParamView<A>& P,
               int64_t Nl) const;
  // dx += d(input); the weight gradients +=. Where the rows are split over
  // the group (sequence parallel, or a QK-norm's heads: `partial`), they are
  // partial sums: computed into `stats` (2C floats), summed over the group,
  // then added (`fp32` adds; `dev` zeroes).
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* dx, const A* dy, const A* x,
                const ParamView<A>& P, const GradView& G, const float* mean, const float* rstd, int64_t Nl,
                const kernels::Ops& fp32, Device dev, float* stats, bool partial = false) const;
};
using LayerNorm = Norm;

// Causal self-attention over this rank's heads: the kernel, or with a
// context-parallel exchange (cp: not owned) the exchange's passes.
struct Attention {
  CpAttention* cp = nullptr;
  int64_t C = 0, heads = 0;  // this rank's attention columns and heads
  // The dropout masks' (sample, head) index: the model's heads per sample,
  // this rank's first head, and the index's stride (0: the call's heads).
  int64_t all_heads = 0, first_head = 0, head_stride = 0;
  // The probabilities' dropout of a pass with the masks of stream `stream`:
  // indexed by global sample and head, so any data or tensor split draws the one-rank masks.
  kernels::AttnDropout dropout(const PassShape& f, uint64_t stream) const {
    return {f.p, f.ctx->seed, stream, f.ctx->sample_offset * all_heads + first_head, head_stride};
  }
  // out [B, T, C] and lse from qkv [B, T, 3C]; out_h, scratch: the exchange's (cp_attention.h).
  // With a KV cache in the pass, layer l's cached positions join (kv_cache.h).
  template <class A>
  void forward(const kernels::ModelOps<A>& k, int64_t l, A* out, float* lse, A* qkv, A* out_h, const PassShape& f,
               uint64_t stream, float* ws, A* scratch) const;
  template <class A>
  void backward(const kernels::ModelOps<A>& k, A* dqkv, const A* dout, const A* qkv, const A* out, const A* out_h,
                const float* lse, const PassShape& f, uint64_t stream, float* ws, A* scratch) const;
};

}  // namespace parallm::model
