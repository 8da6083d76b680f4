// The block's layers (layers.h): each pass is the kernel calls of its kind,
// with the group's communication where the kind needs it.
#include "model/layers.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/gpu.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "model/cp_attention.h"
#include "model/kv_cache.h"

namespace parallm::model {

namespace {
// FP8 products (kernels/fp8.h): a row split over the tensor group has its maximum reduced there; none without one.
kernels::Fp8RowMax group_max(const TensorSplit& s) {
  if (!s.active()) return {};
  return {[](void* g, float* a, int64_t n) { static_cast<TensorGroup*>(g)->max(a, n); }, s.group()};
}
}  // namespace

template <class A>
void PassShape::dropout_rows(const kernels::ModelOps<A>& k, bool backward, A* out, const A* in, uint64_t stream) const {
  const auto fn = backward ? k.dropout_backward : k.dropout_forward;
  if (!by_runs) return fn(out, in, Nl * C, p, ctx->seed, stream, drop_base);
  for (int64_t b = 0; b < B; ++b)  // element (sample s, global position t, channel c) has index (s Tg + t) C + c
    for (const CpRun& r : runs) {
      const int64_t o = (b * T + r.local) * C;
      fn(out + o, in + o, r.len * C, p, ctx->seed, stream,
         static_cast<uint64_t>(((ctx->sample_offset + b) * Tg + r.global) * C));
    }
}

template <class A>
void ColumnLinear::forward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* y, const A* x, const ParamView<A>& P,
                           int64_t N) const {
  k.matmul_forward(y, s.whole_rows(x, N), P.at(w), P.at(b), N, in, out);
}

template <class A>
void ColumnLinear::backward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* dx, const A* dy, const A* x,
                            const ParamView<A>& P, const GradView& G, int64_t N) const {
  float* dw = G.linear(w);
  const kernels::Fp8SplitScope fp8({}, group_max(s));  // d(output) rows split over the outputs
  k.matmul_backward(s.partial_for(dx), dw, G.linear(b), dy, dw ? s.whole_rows(x, N) : nullptr, P.at(w), N, in, out);
  s.sum_partials(dx, N);
}

template <class A>
void ColumnLinear::weight_backward(const kernels::ModelOps<A>& k, const TensorSplit& s, const A* dy, const A* x,
                                   const ParamView<A>& P, const GradView& G, int64_t N) const {
  const kernels::Fp8SplitScope fp8({}, group_max(s));
  k.matmul_backward(nullptr, G.at(w), G.at(b), dy, s.whole_rows(x, N), P.at(w), N, in, out);
}

template <class A>
void RowLinear::forward_residual(const kernels::ModelOps<A>& k, const TensorSplit& s, A* y, const A* res, const A* x,
                                 const ParamView<A>& P, A* tmp, const PassShape& f, uint64_t drop_stream) const {
  // One GEMM where the kernels offer the fused form and nothing sits between
  // the product and the add; else the product into tmp, dropout, the add.
  const int64_t N = f.N, Nl = f.Nl;
  const kernels::Fp8SplitScope fp8(group_max(s), {});  // the input's and the weight's rows split over the inputs
  if (s.active()) {
    k.matmul_forward(s.row_partial_for(tmp), x, P.at(w), nullptr, N, in, out);
    s.reduce_rows(tmp, N);
    if (b >= 0) k.bias_forward(tmp, P.at(b), Nl, out);
  } else if (f.p <= 0 && k.matmul_forward_residual) {
    k.matmul_forward_residual(y, x, P.at(w), P.at(b), res, N, in, out);
    return;
  } else {
    k.matmul_forward(tmp, x, P.at(w), P.at(b), N, in, out);
  }
  if (f.p > 0) f.dropout_rows(k, false, tmp, tmp, drop_stream);
  k.residual_forward(y, res, tmp, Nl * out);
}

template <class A>
void RowLinear::backward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* dx, const A* dy, const A* x,
                         const ParamView<A>& P, const GradView& G, int64_t N) const {
  const kernels::Fp8SplitScope fp8(group_max(s), {});
  k.matmul_backward(dx, G.linear(w), G.linear(b), dy, x, P.at(w), N, in, out);
}

template <class A>
void ColumnLinears::forward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* const* y, const A* x,
                            const ParamView<A>& P, int64_t N) const {
  const A* whole = s.whole_rows(x, N);  // gathered once
  for (int i = 0; i < n; ++i) k.matmul_forward(y[i], whole, P.at(l[i].w), P.at(l[i].b), N, l[i].in, l[i].out);
}

template <class A>
void ColumnLinears::backward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* dx, const A* const* dy, const A* x,
                             const ParamView<A>& P, const GradView& G, int64_t N, A* tmp) const {
  const A* whole = G.weights ? s.whole_rows(x, N) : nullptr;
  A* sum = s.partial_for(dx);
  const kernels::Fp8SplitScope fp8({}, group_max(s));
  for (int i = 0; i < n; ++i) {
    const ColumnLinear& c = l[i];
    float* dw = c.own_grads ? nullptr : G.linear(c.w);
    float* db = c.own_grads ? nullptr : G.linear(c.b);
    k.matmul_backward(i == 0 ? sum : tmp, dw, db, dy[i], dw ? whole : nullptr, P.at(c.w), N, c.in, c.out);
    if (i > 0) k.residual_forward(sum, sum, tmp, N * c.in);
  }
  s.sum_partials(dx, N);
}

template <class A>
void ColumnLinears::weight_backward(const kernels::ModelOps<A>& k, const TensorSplit& s, const A* const* dy, const A* x,
                                    const ParamView<A>& P, const GradView& G, int64_t N) const {
  const A* whole = s.whole_rows(x, N);
  const kernels::Fp8SplitScope fp8({}, group_max(s));
  for (int i = 0; i < n; ++i)
    if (!l[i].own_grads)
      k.matmul_backward(nullptr, G.at(l[i].w), G.at(l[i].b), dy[i], whole, P.at(l[i].w), N, l[i].in, l[i].out);
}

template <class A>
void Norm::forward(const kernels::ModelOps<A>& k, A* y, float* mean, float* rstd, const A* x, const ParamView<A>& P,
                   int64_t Nl) const {
  if (rms)
    k.rmsnorm_forward(y, rstd, x, P.at(w), Nl, C, eps);
  else
    k.layernorm_forward(y, mean, rstd, x, P.at(w), P.at(b), Nl, C);
}

template <class A>
void Norm::backward(const kernels::ModelOps<A>& k, const TensorSplit& s, A* dx, const A* dy, const A* x,
                    const ParamView<A>& P, const GradView& G, const float* mean, const float* rstd, int64_t Nl,
                    const kernels::Ops& fp32, Device dev, float* stats, bool partial) const {
  auto run = [&](float* dw, float* db) {
    if (rms)
      k.rmsnorm_backward(dx, dw, dy, x, P.at(w), rstd, Nl, C);
    else
      k.layernorm_backward(dx, dw, db, dy, x, P.at(w), mean, rstd, Nl, C);
  };
  if (!(s.splits_rows() || (partial && s.active()))) return run(G.at(w), G.at(b));
  if (dev.is_cpu())
    std::memset(stats, 0, 2 * C * sizeof(float));
  else
    gpu::memset_zero(stats, 2 * C * sizeof(float));
  run(stats, b >= 0 ? stats + C : nullptr);
  s.group()->sum(stats, 2 * C);
  fp32.add_inplace(G.at(w), stats, C);
  if (b >= 0) fp32.add_inplace(G.at(b), stats + C, C);
}

template <class A>
void Attention::forward(const kernels::ModelOps<A>& k, int64_t l, A* out, float* lse, A* qkv, A* out_h,
                        const PassShape& f, uint64_t stream, float* ws, A* scratch) const {
  if (f.cache) {
    if constexpr (std::is_same_v<A, float>) return f.cache->attend(k, l, out, lse, qkv, f.N);
    throw InternalError("model.attention", "a KV cache takes fp32 activations");
  }
  const kernels::AttnDropout drop = dropout(f, stream);
  if (cp)
    cp->forward(k, out, lse, qkv, out_h, f.B, f.T, C, heads, drop, ws, scratch);
  else
    k.attention_forward(out, lse, qkv, f.B, f.T, C, heads, drop, ws);
}

template <class A>
void Attention::backward(const kernels::ModelOps<A>& k, A* dqkv, const A* dout, const A* qkv, const A* out,
                         const A* out_h, const float* lse, const PassShape& f, uint64_t stream, float* ws,
                         A* scratch) const {
  const kernels::AttnDropout drop = dropout(f, stream);
  if (cp)
    cp->backward(k, dqkv, dout, qkv, out, out_h, lse, f.B, f.T, C, heads, drop, ws, scratch);
  else
    k.attention_backward(dqkv, dout, qkv, out, lse, f.B, f.T, C, heads, drop, ws);
}

#define PARALLM_LAYERS(A)                                                                                             \
  template void PassShape::dropout_rows<A>(const kernels::ModelOps<A>&, bool, A*, const A*, uint64_t) const;          \
  template void ColumnLinear::forward<A>(const kernels::ModelOps<A>&, const TensorSplit&, A*, const A*,               \
                                         const ParamView<A>&, int64_t) const;                                         \
  template void ColumnLinear::backward<A>(const kernels::ModelOps<A>&, const TensorSplit&, A*, const A*, const A*,    \
                                          const ParamView<A>&, const GradView&, int64_t) const;                       \
  template void ColumnLinear::weight_backward<A>(const kernels::ModelOps<A>&, const TensorSplit&, const A*, const A*, \
                                                 const ParamView<A>&, const GradView&, int64_t) const;                \
  template void RowLinear::forward_residual<A>(const kernels::ModelOps<A>&, const TensorSplit&, A*, const A*,         \
                                               const A*, const ParamView<A>&, A*, const PassShape&, uint64_t) const;  \
  template void RowLinear::backward<A>(const kernels::ModelOps<A>&, const TensorSplit&, A*, const A*, const A*,       \
                                       const ParamView<A>&, const GradView&, int64_t) const;                          \
  template void ColumnLinears::forward<A>(const kernels::ModelOps<A>&, const TensorSplit&, A* const*, const A*,       \
                                          const ParamView<A>&, int64_t) const;                                        \
  template void ColumnLinears::backward<A>(const kernels::ModelOps<A>&, const TensorSplit&, A*, const A* const*,      \
                                           const A*, const ParamView<A>&, const GradView&, int64_t, A*) const;        \
  template void ColumnLinears::weight_backward<A>(const kernels::ModelOps<A>&, const TensorSplit&, const A* const*,   \
                                                  const A*, const ParamView<A>&, const GradView&, int64_t) const;     \
  template void LayerNorm::forward<A>(const kernels::ModelOps<A>&, A*, float*, float*, const A*, const ParamView<A>&, \
                                      int64_t) const;                                                                 \
  template void LayerNorm::backward<A>(const kernels::ModelOps<A>&, const TensorSplit&, A*, const A*, const A*,       \
                                       const ParamView<A>&, const GradView&, const float*, const float*, int64_t,     \
                                       const kernels::Ops&, Device, float*, bool) const;                              \
  template void Attention::forward<A>(const kernels::ModelOps<A>&, int64_t, A*, float*, A*, A*, const PassShape&,     \
                                      uint64_t, float*, A*) const;                                                    \
  template void Attention::backward<A>(const kernels::ModelOps<A>&, A*, const A*, const A*, const A*, const A*,       \
                                       const float*, const PassShape&, uint64_t, float*, A*) const;
PARALLM_LAYERS(float)
PARALLM_LAYERS(bfloat16)
#undef PARALLM_LAYERS

}  // namespace parallm::model
