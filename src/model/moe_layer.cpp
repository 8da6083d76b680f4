// The mixture-of-experts layer's passes (moe_layer.h). Like the blocks, it
// reads as the one-rank layer: the tensor split's operations (whole rows,
// partial sums) and the data group's count sum are the only places a layout shows.
#include "model/moe_layer.h"

#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/gpu.h"
#include "kernels/ops.h"

namespace parallm::model {

namespace {
void to_host(Device dev, void* dst, const void* src, size_t bytes) {
  if (dst == src) return;
  if (dev.is_cpu())
    std::memcpy(dst, src, bytes);
  else
    gpu::memcpy_d2h(dst, src, bytes);
}
void to_device(Device dev, void* dst, const void* src, size_t bytes) {
  if (dst == src) return;
  if (dev.is_cpu())
    std::memcpy(dst, src, bytes);
  else
    gpu::memcpy_h2d(dst, src, bytes);
}
float host_float(float x) {
  return x;
}
float host_float(bfloat16 x) {
  return bf16_to_f32(x.bits);
}
int32_t* ints(float* p) {
  return reinterpret_cast<int32_t*>(p);
}
uint64_t mix(uint64_t x) {  // SplitMix64's finalizer
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// The pass's tokens' choices of layer l (ids: N x K), each token's hash keyed by its global (micro-step, sample,
// position), added up wrapping: every split of a global batch over ranks sums to the same value (MoeTally::choices).
uint64_t choice_digest(const int32_t* ids, int64_t K, int64_t l, const PassShape& f) {
  uint64_t sum = 0;
  const uint64_t pass = mix(mix(f.ctx->micro_step + 1) ^ static_cast<uint64_t>(l + 1));
  f.for_position_runs([&](int64_t row0, int64_t pos0, int64_t nB, int64_t nT) {
    for (int64_t b = 0; b < nB; ++b)
      for (int64_t t = 0; t < nT; ++t) {
        const int64_t row = row0 + b * f.T + t;  // sample row / T of the pass, global position pos0 + t
        const auto token = static_cast<uint64_t>((f.ctx->sample_offset + row / f.T) * f.Tg + pos0 + t);
        uint64_t h = mix(pass ^ mix(token));
        for (int64_t j = 0; j < K; ++j) h = mix(h + static_cast<uint64_t>(ids[row * K + j]) + 1);
        sum += h;
      }
  });
  return sum;
}
}  // namespace

MoeLayer::MoeLayer(const BlockParams& bp, const GPTConfig& cfg, const BlockWidths& w, ExpertPart groups)
    : router_(bp.router),
      bias_(bp.router_bias),
      gate_(bp.ex_gate),
      up_(bp.ex_up),
      down_(bp.ex_down),
      sgate_(bp.fc_w),
      sup_(bp.up_w),
      sdown_(bp.fcproj_w),
      E_(cfg.moe.experts),
      K_(cfg.moe.top_k),
      F_(w.expert),
      S_(w.shared),
      C_(w.C),
      routing_{cfg.moe.score, cfg.moe.norm_topk, static_cast<float>(cfg.moe.routed_scale)},
      capacity_(cfg.moe.capacity),
      aux_coef_(static_cast<float>(cfg.moe.aux_coef)),
      z_coef_(static_cast<float>(cfg.moe.z_coef)),
      data_(groups.data),
      ep_(groups.ep_size() > 1 ? groups.ep : nullptr),
      El_(cfg.moe.experts / groups.ep_size()) {}

void MoeLayer::report(const BlockEnv& e, const StepContext& ctx) const {
  e.ready(ctx, {router_, bias_, gate_, up_, down_, sgate_, sup_, sdown_});
}

template <class A>
double MoeLayer::route(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const LayerActs::Moe& m,
                       const PassShape& f) const {
  const bool cpu = e.dev.is_cpu();
  const int64_t N = f.N, NK = N * K_;
  // The choices on the host (on the CPU the statistics are host memory).
  int32_t* ids = cpu ? ints(e.acts.stat(m.ids)) : e.acts.host_i32(m.h_ids);
  to_host(e.dev, ids, e.acts.stat(m.ids), NK * sizeof(int32_t));
  int32_t* off = e.acts.host_i32(m.h_off);
  int32_t* slot = cpu ? ints(e.acts.stat(m.slot)) : e.acts.host_i32(m.h_slot);
  int32_t* src = cpu ? ints(e.acts.stat(m.src)) : e.acts.host_i32(m.h_src);
  // The counts (and for the balancing loss's value the probabilities' sums,
  // the z-loss's squares and the dropped choices), summed over the data group when training.
  float* sums = e.acts.host(m.h_counts);  // [E counts | E sums of P | sum of lse^2 | dropped]
  const bool drop = capacity_ > 0 && f.ctx->train;
  const int32_t rows = permute(ids, N, f.T, drop, off, slot, src, sums);
  to_device(e.dev, e.acts.stat(m.slot), slot, NK * sizeof(int32_t));
  to_device(e.dev, e.acts.stat(m.src), src, rows * sizeof(int32_t));
  if (!f.ctx->need_grad) return static_cast<double>(N);
  e.acts.moe_tally().choices += choice_digest(ids, K_, l, f);
  const A* z = e.acts.act<A>(m.logits);
  A* zh = cpu ? const_cast<A*>(z) : reinterpret_cast<A*>(e.acts.host_fixed(e.acts.plan().h_logits));
  to_host(e.dev, zh, z, N * E_ * sizeof(A));
  std::fill(sums + E_, sums + 2 * E_ + 1, 0.0f);
  sums[2 * E_ + 1] = static_cast<float>(NK - rows);
  // Each token's balancing probabilities P (softmax; sigmoid scores over their sum), recomputed in the
  // second pass rather than kept: nothing is allocated per pass.
  const bool softmax = routing_.score == kernels::MoeScore::Softmax;
  auto score = [&](double v, double lse) { return softmax ? std::exp(v - lse) : 1 / (1 + std::exp(-v)); };
  double lse2 = 0;
  for (int64_t t = 0; t < N; ++t) {
    const A* r = zh + t * E_;
    double mx = host_float(r[0]), s = 0, ps = 0;
    for (int64_t x = 1; x < E_; ++x) mx = std::max(mx, static_cast<double>(host_float(r[x])));
    for (int64_t x = 0; x < E_; ++x) s += std::exp(host_float(r[x]) - mx);
    const double lse = mx + std::log(s);
    lse2 += lse * lse;
    if (!softmax)
      for (int64_t x = 0; x < E_; ++x) ps += score(host_float(r[x]), lse);
    for (int64_t x = 0; x < E_; ++x)
      sums[E_ + x] += static_cast<float>(softmax ? score(host_float(r[x]), lse) : score(host_float(r[x]), lse) / ps);
  }
  sums[2 * E_] = static_cast<float>(lse2);
  if (data_ && data_->size() > 1) {
    float* d = e.acts.stat(m.sums);
    to_device(e.dev, d, sums, (2 * E_ + 2) * sizeof(float));
    data_->sum(d, 2 * E_ + 2);
    to_host(e.dev, sums, d, (2 * E_ + 2) * sizeof(float));
  }
  double chosen = 0, dot = 0;
  for (int64_t x = 0; x < E_; ++x) {
    chosen += sums[x];
    dot += static_cast<double>(sums[x]) * sums[E_ + x];
  }
  const double Ng = chosen / static_cast<double>(K_);
  Activations::MoeTally& tally = e.acts.moe_tally();
  if (tally.tokens.empty()) tally.tokens.assign(static_cast<size_t>(e.acts.plan().la.size() * E_), 0.0);
  for (int64_t x = 0; x < E_; ++x) tally.tokens[static_cast<size_t>(l * E_ + x)] += sums[x];
  tally.aux += aux_coef_ * static_cast<double>(E_) / (static_cast<double>(K_) * Ng * Ng) * dot;
  tally.z += z_coef_ * sums[2 * E_] / Ng;
  tally.dropped += sums[2 * E_ + 1];
  return Ng;
}

int32_t MoeLayer::permute(const int32_t* ids, int64_t N, int64_t T, bool drop, int32_t* off, int32_t* slot,
                          int32_t* src, float* counts) const {
  const int64_t NK = N * K_;
  // Which choices each expert takes: all (dropless), or in each sequence of T
  // rows the first `cap` in position order (choices of one token in order).
  const int64_t cap =
      drop ? static_cast<int64_t>(std::ceil(capacity_ * static_cast<double>(T * K_) / static_cast<double>(E_))) : NK;
  std::fill(off, off + E_ + 1, 0);
  std::fill(counts, counts + E_, 0.0f);
  std::array<int32_t, kMaxExperts> taken{};
  for (int64_t i = 0; i < NK; ++i) {
    if (drop && i % (T * K_) == 0) taken.fill(0);  // a new sequence
    const auto x = static_cast<size_t>(ids[i]);
    counts[x] += 1;
    const bool keep = taken[x] < cap;
    taken[x] += keep ? 1 : 0;
    slot[i] = keep ? 0 : -1;
    off[x + 1] += keep ? 1 : 0;
  }
  for (int64_t x = 0; x < E_; ++x) off[x + 1] += off[x];
  // Each expert's kept rows in token order: its first row off[e], token t's choice j at slot[t K + j].
  std::array<int32_t, kMaxExperts> cursor{};
  std::copy(off, off + E_, cursor.begin());
  for (int64_t i = 0; i < NK; ++i) {
    if (slot[i] < 0) continue;
    const int32_t s = cursor[static_cast<size_t>(ids[i])]++;
    slot[i] = s;
    src[s] = static_cast<int32_t>(i / K_);
  }
  return off[E_];
}

template <class A>
void MoeLayer::experts_forward(const kernels::ModelOps<A>& k, const BlockEnv& e, const LayerActs::Moe& m,
                               const ParamView<A>& P, const int32_t* off, A* ye) const {
  const A* xe = e.acts.act<A>(m.xe);
  A *hg = e.acts.act<A>(m.hg), *hu = e.acts.act<A>(m.hu), *ha = e.acts.act<A>(m.ha);
  // The grouped product: each expert's rows through its own weights (none for an expert without tokens).
  for (int64_t x = 0; x < El_; ++x) {
    const int64_t r0 = off[x], n = off[x + 1] - off[x];
    if (n == 0) continue;
    k.matmul_forward(hg + r0 * F_, xe + r0 * C_, P.at(gate_) + x * F_ * C_, nullptr, n, C_, F_);
    k.matmul_forward(hu + r0 * F_, xe + r0 * C_, P.at(up_) + x * F_ * C_, nullptr, n, C_, F_);
  }
  const int64_t rows = off[El_];
  k.swiglu_forward(ha, hg, hu, rows * F_);
  for (int64_t x = 0; x < El_; ++x) {
    const int64_t r0 = off[x], n = off[x + 1] - off[x];
    if (n > 0) k.matmul_forward(ye + r0 * C_, ha + r0 * F_, P.at(down_) + x * C_ * F_, nullptr, n, F_, C_);
  }
}

MoeLayer::Exchange MoeLayer::exchange(const BlockEnv& e, const LayerActs::Moe& m, bool forward) const {
  const ActivationPlan& plan = e.acts.plan();
  const int64_t P = ep_->size();
  const int32_t* off = e.acts.host_i32(m.h_off);  // this rank's rows by expert (all E)
  int32_t* got = e.acts.host_i32(m.h_recv);       // [i El + x]: source i's rows for local expert x
  if (forward) {  // the counts: expert x's rows to the rank holding x, on the device for the group
    int32_t* d = ints(e.acts.stat(plan.moe_counts));
    for (int64_t x = 0; x < E_; ++x) got[x] = off[x + 1] - off[x];  // staged through the counts received' buffer
    to_device(e.dev, d, got, E_ * sizeof(int32_t));
    ep_->all_to_all(d, d + E_, El_);
    to_host(e.dev, got, d + E_, E_ * sizeof(int32_t));
  }
  Exchange x{};
  for (int64_t j = 0; j < P; ++j) {
    x.send[j] = static_cast<int64_t>(off[(j + 1) * El_] - off[j * El_]) * C_;
    int64_t r = 0;
    for (int64_t y = 0; y < El_; ++y) r += got[j * El_ + y];
    x.recv[j] = r * C_;
  }
  // Expert order: expert y's rows from source 0, then 1, ...; source order: source i's rows for its experts in turn.
  x.off[0] = 0;
  for (int64_t y = 0; y < El_; ++y) {
    int32_t n = 0;
    for (int64_t i = 0; i < P; ++i) n += got[i * El_ + y];
    x.off[y + 1] = x.off[y] + n;
  }
  const int32_t rows = x.off[El_];
  int32_t* to_expert = reinterpret_cast<int32_t*>(e.acts.host_fixed(plan.h_perm));
  int32_t* to_source = to_expert + rows;
  std::array<int32_t, kMaxExperts> at{};  // the next expert-order row of each local expert
  std::copy(x.off, x.off + El_, at.begin());
  int32_t q = 0;  // the source-order row
  for (int64_t i = 0; i < P; ++i)
    for (int64_t y = 0; y < El_; ++y)
      for (int32_t c = 0; c < got[i * El_ + y]; ++c, ++q) {
        const int32_t r = at[static_cast<size_t>(y)]++;
        to_expert[r] = q;
        to_source[q] = r;
      }
  int32_t* d = ints(e.acts.stat(plan.moe_perm));
  to_device(e.dev, d, to_expert, 2 * static_cast<size_t>(rows) * sizeof(int32_t));
  x.to_expert = d;
  x.to_source = d + rows;
  return x;
}

template <class A>
void MoeLayer::dispatch(const kernels::ModelOps<A>& k, const Exchange& x, const A* in, A* tmp, A* out) const {
  ep_->all_to_all_v(in, x.send, tmp, x.recv);
  k.moe_gather(out, tmp, x.to_expert, x.off[El_], C_);
}

template <class A>
void MoeLayer::undispatch(const kernels::ModelOps<A>& k, const Exchange& x, const A* in, A* tmp, A* out) const {
  k.moe_gather(tmp, in, x.to_source, x.off[El_], C_);
  ep_->all_to_all_v(tmp, x.recv, out, x.send);
}

template <class A>
void MoeLayer::forward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, A* y, const A* res, const A* x,
                       const ParamView<A>& P, const PassShape& f, uint64_t drop_stream) const {
  const LayerActs& a = e.acts.layer(l);
  const LayerActs::Moe& m = a.moe;
  const TensorSplit& s = e.split;
  const int64_t N = f.N;
  const A* xw = s.whole_rows(x, N);
  A* z = e.acts.act<A>(m.logits);
  k.matmul_forward(z, xw, P.at(router_), nullptr, N, C_, E_);
  k.moe_route_forward(e.acts.stat(m.w), ints(e.acts.stat(m.ids)), e.acts.stat(m.lse), z, P.at(bias_), N, E_, K_,
                      routing_);
  route(k, e, l, m, f);
  A* xp = e.acts.act<A>(m.xp);
  k.moe_gather(xp, xw, ints(e.acts.stat(m.src)), e.acts.host_i32(m.h_off)[E_], C_);  // the kept choices
  if (ep_) {  // to the experts' ranks and back (the rows received and their outputs in the backward's scratch)
    const Exchange ex = exchange(e, m, true);
    A *ta = e.acts.scr<A>(e.acts.plan().s_moe_a), *tb = e.acts.scr<A>(e.acts.plan().s_moe_b);
    dispatch(k, ex, xp, ta, e.acts.act<A>(m.xe));
    experts_forward(k, e, m, P, ex.off, tb);
    undispatch(k, ex, tb, ta, e.acts.act<A>(m.yp));
  } else {
    experts_forward(k, e, m, P, e.acts.host_i32(m.h_off), e.acts.act<A>(m.yp));
  }
  A* tmp = e.acts.scr<A>(e.acts.plan().s_tmp);
  A* part = s.row_partial_for(tmp);
  k.moe_combine(part, e.acts.act<A>(m.yp), ints(e.acts.stat(m.slot)), e.acts.stat(m.w), N, K_, C_);
  if (sgate_ >= 0) {  // the shared experts, added to the partial sum
    A *sg = e.acts.act<A>(a.fch), *su = e.acts.act<A>(a.up), *sa = e.acts.act<A>(a.fch_gelu);
    A* t2 = e.acts.scr<A>(e.acts.plan().s_dx2);
    k.matmul_forward(sg, xw, P.at(sgate_), nullptr, N, C_, S_);
    k.matmul_forward(su, xw, P.at(sup_), nullptr, N, C_, S_);
    k.swiglu_forward(sa, sg, su, N * S_);
    k.matmul_forward(t2, sa, P.at(sdown_), nullptr, N, S_, C_);
    k.residual_forward(part, part, t2, N * C_);
  }
  s.reduce_rows(tmp, N);
  if (f.p > 0) f.dropout_rows(k, false, tmp, tmp, drop_stream);
  k.residual_forward(y, res, tmp, f.Nl * C_);
}

template <class A>
void MoeLayer::experts_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, const LayerActs::Moe& m,
                                const ParamView<A>& P, const GradView& G, const int32_t* off, const A* dyp,
                                A* dxp) const {
  const A *xe = e.acts.act<A>(m.xe), *hg = e.acts.act<A>(m.hg), *hu = e.acts.act<A>(m.hu), *ha = e.acts.act<A>(m.ha);
  const int64_t rows = off[El_];
  A* dhg = e.acts.scr<A>(e.acts.plan().s_moe_f);
  A* dhu = dhg + rows * F_;
  for (int64_t x = 0; x < El_; ++x) {
    const int64_t r0 = off[x], n = off[x + 1] - off[x];
    if (n > 0)
      k.matmul_backward(dhu + r0 * F_, G.at(down_) + x * C_ * F_, nullptr, dyp + r0 * C_, ha + r0 * F_,
                        P.at(down_) + x * C_ * F_, n, F_, C_);
  }
  k.swiglu_backward(dhg, dhu, dhu, hg, hu, rows * F_);
  A* dxu = const_cast<A*>(dyp);  // consumed: the up projections' input gradients go there
  for (int64_t x = 0; x < El_; ++x) {
    const int64_t r0 = off[x], n = off[x + 1] - off[x];
    if (n == 0) continue;
    k.matmul_backward(dxp + r0 * C_, G.at(gate_) + x * F_ * C_, nullptr, dhg + r0 * F_, xe + r0 * C_,
                      P.at(gate_) + x * F_ * C_, n, C_, F_);
    k.matmul_backward(dxu + r0 * C_, G.at(up_) + x * F_ * C_, nullptr, dhu + r0 * F_, xe + r0 * C_,
                      P.at(up_) + x * F_ * C_, n, C_, F_);
  }
  k.residual_forward(dxp, dxp, dxu, rows * C_);
}

template <class A>
void MoeLayer::backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, A* dx, const A* dy, const A* x,
                        const ParamView<A>& P, const GradView& G, const PassShape& f) const {
  const LayerActs& a = e.acts.layer(l);
  const LayerActs::Moe& m = a.moe;
  const ActivationPlan& plan = e.acts.plan();
  const TensorSplit& s = e.split;
  const int64_t N = f.N;
  const A* xw = s.whole_rows(x, N);
  A* part = s.partial_for(dx);
  const int32_t* slot = ints(e.acts.stat(m.slot));
  // The routed experts: d(weights) (partial sums over the tensor group: summed), the experts, back to the tokens.
  A* dyp = e.acts.scr<A>(plan.s_moe_a);
  A* dxp = e.acts.scr<A>(plan.s_moe_b);
  float* dw = e.acts.stat(plan.moe_dw);
  k.moe_combine_backward(dyp, dw, dy, e.acts.act<A>(m.yp), slot, e.acts.stat(m.w), N, K_, C_);
  s.sum_stat(dw, N * K_);
  // The shared experts' down projection reads dy too: before `part` (which may hold dy) is written.
  A* dsg = e.acts.scr<A>(plan.s_dfch);
  A* dsu = e.acts.scr<A>(plan.s_dfch2);
  if (sgate_ >= 0)
    k.matmul_backward(dsg, G.at(sdown_), nullptr, dy, e.acts.act<A>(a.fch_gelu), P.at(sdown_), N, S_, C_);
  if (ep_) {  // the outputs' gradients to the experts' ranks, the inputs' back (dyp's buffer reused in between)
    const Exchange ex = exchange(e, m, false);
    dispatch(k, ex, dyp, dxp, dyp);
    experts_backward(k, e, m, P, G, ex.off, dyp, dxp);
    undispatch(k, ex, dxp, dyp, dxp);
  } else {
    experts_backward(k, e, m, P, G, e.acts.host_i32(m.h_off), dyp, dxp);
  }
  k.moe_scatter_add(part, dxp, slot, N, K_, C_);
  A* t2 = e.acts.scr<A>(plan.s_dx2);
  if (sgate_ >= 0) {
    k.swiglu_backward(dsg, dsu, dsg, e.acts.act<A>(a.fch), e.acts.act<A>(a.up), N * S_);
    k.matmul_backward(t2, G.at(sgate_), nullptr, dsg, xw, P.at(sgate_), N, C_, S_);
    k.residual_forward(part, part, t2, N * C_);
    k.matmul_backward(t2, G.at(sup_), nullptr, dsu, xw, P.at(sup_), N, C_, S_);
    k.residual_forward(part, part, t2, N * C_);
  }
  // The router: the balancing loss's gradient per unit of each token's P
  // (the global counts; DDP's mean over the data group makes it the global
  // mean's), the z-loss's, and the weights'.
  const float* sums = e.acts.host(m.h_counts);
  double chosen = 0;
  for (int64_t i = 0; i < E_; ++i) chosen += sums[i];
  const double Ng = chosen / static_cast<double>(K_), scale = f.ctx->loss_scale;
  float* aux = nullptr;
  if (aux_coef_ > 0) {
    aux = e.acts.stat(plan.moe_aux);
    float* h = e.dev.is_cpu() ? aux : e.acts.host_fixed(plan.h_logits);
    for (int64_t i = 0; i < E_; ++i)
      h[i] = static_cast<float>(aux_coef_ * static_cast<double>(E_) * scale / (static_cast<double>(K_) * Ng * N) *
                                sums[i]);
    to_device(e.dev, aux, h, E_ * sizeof(float));
  }
  const float z_scale = static_cast<float>(z_coef_ * scale / static_cast<double>(N));
  A* dz = e.acts.scr<A>(plan.s_moe_z);
  const A* z = e.acts.act<A>(m.logits);
  k.moe_route_backward(dz, dw, z, ints(e.acts.stat(m.ids)), e.acts.stat(m.lse), aux, z_scale, N, E_, K_, routing_);
  k.matmul_backward(t2, G.at(router_), nullptr, dz, xw, P.at(router_), N, C_, E_);
  if (s.rank() == 0) k.residual_forward(part, part, t2, N * C_);  // the same on every rank: added once
  s.sum_partials(dx, N);
}

#define PARALLM_MOE(A)                                                                                               \
  template void MoeLayer::forward<A>(const kernels::ModelOps<A>&, const BlockEnv&, int64_t, A*, const A*, const A*,  \
                                     const ParamView<A>&, const PassShape&, uint64_t) const;                         \
  template void MoeLayer::backward<A>(const kernels::ModelOps<A>&, const BlockEnv&, int64_t, A*, const A*, const A*, \
                                      const ParamView<A>&, const GradView&, const PassShape&) const;
PARALLM_MOE(float)
PARALLM_MOE(bfloat16)
#undef PARALLM_MOE

}  // namespace parallm::model
