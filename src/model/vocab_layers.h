// The layers at the two ends of a language model, over the vocabulary, each
// owning its vocabulary-parallel form (Megatron's VocabParallelEmbedding and
// vocabulary-parallel cross-entropy): under tensor parallelism a rank holds
// rows [v0, v0 + rows) of the token table (the vocabulary padded to a
// multiple of tp) and the group combines what each computes.
//
//   Embedding  x = wte[token] + wpe[position]: each rank embeds the tokens of
//              its rows (zeros elsewhere), rank 0 adds the positions, and the
//              sum over the group (sequence parallel: reduce-scattered by
//              rows) is exact.
//   Head       the logits x W^T and the cross-entropy: one rank fuses both
//              (the classifier kernel); tensor parallel, each rank's logits of
//              its rows, the row maxima and sums of exponentials combined
//              over the group (N and 2N floats, never V), and the input
//              gradient summed as a column-parallel linear's.
// The head's weight is the token table (tied, GPT-2) or a matrix of its own
// (an untied head), sharded by the same rows.
#pragma once
#include <cstdint>

#include "core/device.h"
#include "model/layers.h"
#include "model/params.h"

namespace parallm::model {

struct Embedding {
  int64_t wte = -1, wpe = -1, C = 0;
  ParamLayout::VocabRows rows;  // this rank's (tensor parallel)
  // x (this rank's rows) from the tokens [B, T] (global positions f's).
  template <class A>
  void forward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* x, const int32_t* tokens, const ParamView<A>& P,
               const PassShape& f) const;
  // The tables' gradients += from dx (this rank's rows of d(output)).
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const TensorSplit& s, const A* dx, const int32_t* tokens,
                const GradView& G, const PassShape& f) const;
};

// The loss's buffers, tensor parallel: fp32 logits of this rank's rows
// [N, rows], row maxima [N], sums [2N]; d(logits) in the compute type
// (nullptr: in place over the fp32 logits). One rank: the kernel's workspace.
template <class A>
struct HeadBuffers {
  float* logits = nullptr;
  float* max = nullptr;
  float* sums = nullptr;
  A* dlogits = nullptr;
  float* ws = nullptr;
};

struct Head {
  int64_t w = -1, C = 0, V = 0;
  ParamLayout::VocabRows rows;
  // Per-position losses [N] of x (this rank's rows of the final norm's
  // output) against targets; with dx, also dx = d(loss) and dw += its weight
  // gradient, for d(loss)/d(each position's loss) = dloss.
  template <class A>
  void loss(const kernels::ModelOps<A>& k, const TensorSplit& s, float* losses, A* dx, float* dw, const A* x,
            const ParamView<A>& P, const int32_t* targets, int64_t N, float dloss, const HeadBuffers<A>& buf) const;
  // Logits into host `out` [rows of x, V] (every rank's vocabulary rows,
  // gathered): of position pos of each of B sequences of T (pos >= 0), or of
  // every position (pos < 0). x: this rank's rows of the final norm's output.
  template <class A>
  void logits(const kernels::ModelOps<A>& k, const TensorSplit& s, float* out, const A* x, const ParamView<A>& P,
              int64_t B, int64_t T, int64_t pos, Device dev) const;
};

}  // namespace parallm::model
