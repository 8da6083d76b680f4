// The vocabulary layers (vocab_layers.h): one rank's kernels, or their
// vocabulary-parallel forms combined over the tensor-parallel group.
#include "model/vocab_layers.h"

#include <type_traits>
#include <vector>

#include "core/device_array.h"
#include "kernels/ops.h"

namespace parallm::model {

namespace {
// Row `pos` of a position table (null without one: rotary models).
template <class T>
T* row_at(T* table, int64_t pos, int64_t C) {
  return table ? table + pos * C : nullptr;
}
}  // namespace

template <class A>
void Embedding::forward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* x, const int32_t* tokens,
                        const ParamView<A>& P, const PassShape& f) const {
  if (!s.active()) {
    f.for_position_runs([&](int64_t row, int64_t pos, int64_t Bn, int64_t Tn) {
      k.embedding_forward(x + row * C, tokens + row, P.at(wte), row_at(P.at(wpe), f.pos0 + pos, C), Bn, Tn, C);
    });
    return;
  }
  // Each rank embeds its rows' tokens, rank 0 adds the positions; the sum is exact.
  A* parts = s.row_partial_for(x);
  const A* pe = s.rank() == 0 ? P.at(wpe) : nullptr;
  f.for_position_runs([&](int64_t row, int64_t pos, int64_t Bn, int64_t Tn) {
    k.vp_embedding_forward(parts + row * C, tokens + row, P.at(wte), pe ? pe + (f.pos0 + pos) * C : nullptr, Bn, Tn, C,
                           rows.v0, rows.rows);
  });
  s.reduce_rows(x, f.N);
}

template <class A>
void Embedding::backward(const kernels::ModelOps<A>& k, const TensorSplit& s, const A* dx, const int32_t* tokens,
                         const GradView& G, const PassShape& f) const {
  if (!s.active()) {
    f.for_position_runs([&](int64_t row, int64_t pos, int64_t Bn, int64_t Tn) {
      k.embedding_backward(G.at(wte), row_at(G.at(wpe), pos, C), dx + row * C, tokens + row, Bn, Tn, C);
    });
    return;
  }
  // d(output) whole on every rank: each adds its rows' part; wpe's gradient is the same everywhere.
  const A* whole = s.whole_grad(dx, f.N);
  f.for_position_runs([&](int64_t row, int64_t pos, int64_t Bn, int64_t Tn) {
    k.vp_embedding_backward(G.at(wte), row_at(G.at(wpe), pos, C), whole + row * C, tokens + row, Bn, Tn, C, rows.v0,
                            rows.rows);
  });
}

template <class A>
void Head::loss(const kernels::ModelOps<A>& k, const TensorSplit& s, float* losses, A* dx, float* dw, const A* x,
                const ParamView<A>& P, const int32_t* targets, int64_t N, float dloss,
                const HeadBuffers<A>& buf) const {
  if (!s.active()) {
    k.classifier_forward_backward(losses, dx, dw, x, P.at(w), targets, N, C, V, dloss, buf.ws);
    return;
  }
  // The logits of this rank's rows, then the row maxima and the sums of
  // exponentials (and the target's logit) combined over the group.
  const A* whole = s.whole_rows(x, N);
  TensorGroup* tp = s.group();
  k.classifier_logits(buf.logits, whole, P.at(w), N, C, rows.rows);
  k.xent_vp_local_max(buf.max, buf.logits, N, rows.rows, rows.valid);
  tp->max(buf.max, N);
  k.xent_vp_exp_sums(buf.sums, buf.logits, buf.max, targets, N, rows.rows, rows.valid, rows.v0);
  tp->sum(buf.sums, 2 * N);
  k.xent_vp_losses(losses, buf.max, buf.sums, N);
  if (!dx) return;
  A* dlogits;
  if constexpr (std::is_same_v<A, float>)
    dlogits = buf.logits;  // in place
  else
    dlogits = buf.dlogits;
  k.xent_vp_grad(dlogits, buf.logits, buf.max, buf.sums, targets, N, rows.rows, rows.valid, rows.v0, dloss);
  // Column-parallel over the vocabulary: the input gradient is the sum of
  // every rank's part (sequence parallel: back to this rank's rows).
  k.matmul_backward(s.partial_for(dx), dw, nullptr, dlogits, whole, P.at(w), N, C, rows.rows);
  s.sum_partials(dx, N);
}

template <class A>
void Head::logits(const kernels::ModelOps<A>& k, const TensorSplit& s, float* out, const A* x, const ParamView<A>& P,
                  int64_t B, int64_t T, int64_t pos, Device dev) const {
  // Tensor parallel, each rank computes its rows' logits and the group
  // gathers them ([rank][row][column]), real columns only into `out`.
  const bool last_only = pos >= 0;
  const int64_t n = last_only ? B : B * T;
  const int64_t Vr = s.active() ? rows.rows : V, parts = s.size();
  DeviceArray<float> mine, all;
  float* o = out;
  if (!dev.is_cpu() || s.active()) {
    mine = DeviceArray<float>(n * Vr, MemCategory::Scratch, dev);
    o = mine.data();
  }
  const A* whole = s.whole_rows(x, B * T);  // sequence parallel: every rank's rows
  if (last_only)
    for (int64_t b = 0; b < B; ++b) k.classifier_logits(o + b * Vr, whole + (b * T + pos) * C, P.at(w), 1, C, Vr);
  else
    k.classifier_logits(o, whole, P.at(w), n, C, Vr);
  if (!s.active()) {
    if (!dev.is_cpu()) mine.copy_to_host(out, n * V);
    return;
  }
  all = DeviceArray<float>(parts * n * Vr, MemCategory::Scratch, dev);
  s.group()->gather(mine.data(), all.data(), n * Vr);
  std::vector<float> host(static_cast<size_t>(parts * n * Vr));
  all.copy_to_host(host.data(), host.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t v = 0; v < V; ++v) out[r * V + v] = host[((v / Vr) * n + r) * Vr + v % Vr];
}

#define PARALLM_VOCAB_LAYERS(A)                                                                                   \
  template void Embedding::forward<A>(const kernels::ModelOps<A>&, const TensorSplit&, A*, const int32_t*,        \
                                      const ParamView<A>&, const PassShape&) const;                               \
  template void Embedding::backward<A>(const kernels::ModelOps<A>&, const TensorSplit&, const A*, const int32_t*, \
                                       const GradView&, const PassShape&) const;                                  \
  template void Head::loss<A>(const kernels::ModelOps<A>&, const TensorSplit&, float*, A*, float*, const A*,      \
                              const ParamView<A>&, const int32_t*, int64_t, float, const HeadBuffers<A>&) const;  \
  template void Head::logits<A>(const kernels::ModelOps<A>&, const TensorSplit&, float*, const A*,                \
                                const ParamView<A>&, int64_t, int64_t, int64_t, Device) const;
PARALLM_VOCAB_LAYERS(float)
PARALLM_VOCAB_LAYERS(bfloat16)
#undef PARALLM_VOCAB_LAYERS

}  // namespace parallm::model
