// The model's activation memory (activations.h): the plan of every buffer
// for a (B, T), and the buffers allocated from it.
//
// Under tensor parallelism (tp > 1) the attention and MLP activations are
// this rank's heads and hidden columns, and the loss keeps the logits of its
// vocabulary rows (fp32) instead of the one-rank fused head's workspace.
// Sequence parallel, the residual stream, LayerNorms and their statistics
// are this rank's N/tp rows, and two whole-row buffers take the gathers.
// A pipeline stage carves only its chunks' layers, one activation set per
// micro-batch its schedule keeps in flight; recompute's shared buffers and
// the loss's transients exist once. Context parallel, T is the local length
// (every per-token term shrinks by cp); the exchange's buffers are scratch,
// and Ulysses keeps the head-form attention output per layer.
#include "model/activations.h"

#include <omp.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/cp_attention.h"

namespace parallm::model {

namespace {

// A carve's running offsets (activations, statistics; 64-byte aligned) and
// the pass's sizes: N = B T rows, Nl of them on this rank, C channels; this
// rank's attention columns Cl (NH heads), KV columns K (Llama: k and v each;
// GPT-2's qkv holds them) and MLP columns F.
struct Carver {
  int64_t B, T, N, Nl, C, Cl, NH, K, F, KH;
  bool llama, qk_norm;
  const CpLayout& cp;
  int64_t E = 0, NK = 0, Fe = 0, S = 0;  // MoE: experts, routed rows, expert and shared widths
  int64_t R = 0;                         // MoE: the rows a rank's experts may receive (ep x NK)
  int64_t off = 0, soff = 0, hoff = 0;
  int64_t host(int64_t n) {
    const int64_t o = hoff;
    hoff += (n + 15) / 16 * 16;
    return o;
  }
  LayerActs::Moe moe() {
    LayerActs::Moe m;
    m.logits = take(N * E);
    m.xp = take(NK * C);
    m.xe = R > NK ? take(R * C) : m.xp;
    m.hg = take(R * Fe);
    m.hu = take(R * Fe);
    m.ha = take(R * Fe);
    m.yp = take(NK * C);
    m.w = stat(NK);
    m.ids = stat(NK);
    m.slot = stat(NK);
    m.src = stat(NK);
    m.lse = stat(N);
    m.sums = stat(2 * E + 2);
    m.h_ids = host(NK);
    m.h_slot = host(NK);
    m.h_src = host(NK);
    m.h_off = host(E + 1);
    m.h_counts = host(2 * E + 2);
    if (R > NK) m.h_recv = host(E);
    return m;
  }
  // An MoE model's buffers outside the layers (none for a dense one): the statistics and host copies its
  // backward and (expert parallel: R > NK) its exchange use, then its scratch.
  void moe_fixed(ActivationPlan& o) {
    if (E == 0) return;
    o.moe_dw = stat(NK);
    o.moe_aux = stat(E);
    o.h_logits = host(N * E);
    if (R > NK) {
      o.moe_perm = stat(2 * R);
      o.moe_counts = stat(2 * E);
      o.h_perm = host(2 * R);
    }
  }
  void moe_scratch(ActivationPlan& o) {
    if (E == 0) return;
    o.s_moe_a = take(R * C);
    o.s_moe_b = take(R * C);
    o.s_moe_f = take(2 * R * Fe);
    o.s_moe_z = take(N * E);
    if (o.s_dx2 < 0) o.s_dx2 = take(N * C);
  }
  int64_t take(int64_t n) {
    const int64_t o = off;
    off += (n + 15) / 16 * 16;
    return o;
  }
  int64_t stat(int64_t n) {
    const int64_t o = soff;
    soff += (n + 15) / 16 * 16;
    return o;
  }
  // Recomputed buffers are one set shared by every layer (refilled before
  // each layer's backward): selective the norms' and the MLP activation's
  // outputs, full everything but the block's output (the next block's input).
  LayerActs shared(Recompute r) {
    LayerActs s{};
    if (r == Recompute::None) return s;
    s.ln1 = take(Nl * C);
    s.ln2 = take(Nl * C);
    s.fch_gelu = take(N * F);
    if (r != Recompute::Full) return s;
    s.qkv = take(N * 3 * Cl);
    s.atty = take(N * Cl);
    s.res2 = take(Nl * C);
    s.fch = take(N * F);
    if (llama) s.up = take(N * F);
    if (qk_norm) s.qk_pre = take(N * (Cl + K));
    if (const int64_t h = CpAttention::head_out_elems(cp, B, T, Cl)) s.att_h = take(h);
    return s;
  }
  // One block's own buffers beside the shared ones.
  LayerActs block(LayerActs a, Recompute r, bool split_backward, bool is_moe) {
    const bool sel = r == Recompute::Selective, full = r == Recompute::Full;
    if (is_moe) a.moe = moe();
    const int64_t H = is_moe ? S : F;  // the MLP's hidden width (an MoE block's: its shared experts')
    if (!sel && !full) a.ln1 = take(Nl * C);
    if (!llama) a.ln1_mean = stat(Nl);
    a.ln1_rstd = stat(Nl);
    if (qk_norm && !full) a.qk_pre = take(N * (Cl + K));
    if (qk_norm) a.qk_rstd = stat(N * (NH + KH));
    if (!full) a.qkv = take(N * 3 * Cl);
    if (!full) a.atty = take(N * Cl);
    if (const int64_t h = CpAttention::head_out_elems(cp, B, T, Cl); h && !full) a.att_h = take(h);
    a.lse = stat(B * NH * T);
    if (!full) a.res2 = take(Nl * C);
    if (!sel && !full) a.ln2 = take(Nl * C);
    if (!llama) a.ln2_mean = stat(Nl);
    a.ln2_rstd = stat(Nl);
    if (!full) a.fch = take(N * H);
    if (llama && !full) a.up = take(N * H);
    if (!sel && !full) a.fch_gelu = take(N * H);
    a.res3 = take(Nl * C);
    if (split_backward) {
      a.d_fcproj = take(N * C);
      a.d_fc = take(N * H);
      if (llama) a.d_up = take(N * H);
      a.d_proj = take(N * C);
      a.d_qkv = take(N * (llama ? Cl + 2 * K : 3 * Cl));
    }
    return a;
  }
};

}  // namespace

ActivationPlan ActivationPlan::carve(const GPTConfig& cfg, int64_t B, int64_t T, Device dev, int threads, DType compute,
                                     int tp, bool sp, const PipelinePart& pipe, const CpLayout& cp, int ep) {
  const int64_t N = B * T, C = cfg.n_embd, L = cfg.n_layer, Nl = sp ? N / tp : N;
  const BlockWidths w = block_widths(cfg, tp);
  const int64_t Cl = w.attn(), NH = w.heads, vn = (cfg.vocab_size + tp - 1) / tp;
  const std::vector<LayerRange> chunks = pipe.pipelined() ? pipe.stage.chunks : std::vector<LayerRange>{{0, L}};
  const bool last = chunks.back().end == L;
  const bool lowp = compute == DType::BF16 && !dev.is_cpu();  // CPU bf16 keeps fp32 activations
  Carver k{B, T, N, Nl, C, Cl, NH, w.kv(), w.mlp, w.kv_heads, cfg.llama(), cfg.qk_norm(), cp};
  k.E = cfg.moe.experts;
  k.NK = N * cfg.moe.top_k;
  k.R = k.NK * ep;  // dropless: every rank of the group may send all its rows to one rank
  k.Fe = w.expert;
  k.S = w.shared;
  ActivationPlan o;
  o.la.assign(static_cast<size_t>(L), LayerActs{});
  const LayerActs shared = k.shared(cfg.recompute);
  if (tp > 1 && last && lowp) o.dlogits = k.take(N * vn);  // fp32 computes d(logits) over the logits
  o.acts_sets = k.off;
  for (size_t c = 0; c < chunks.size(); ++c) {
    ChunkActs ch;
    ch.sets = pipe.in_flight.empty() ? 1 : std::max(1, pipe.in_flight[c]);
    const int64_t a0 = k.off, s0 = k.soff, h0 = k.hoff;
    ch.input = k.take(Nl * C);
    if (pipe.pipelined()) ch.grad = k.take(Nl * C);
    for (int64_t l = chunks[c].begin; l < chunks[c].end; ++l)
      o.la[static_cast<size_t>(l)] = k.block(shared, cfg.recompute, pipe.split_backward, cfg.moe_layer(l));
    if (last && c + 1 == chunks.size()) {
      ch.lnf = k.take(Nl * C);
      if (!cfg.llama()) ch.lnf_mean = k.stat(Nl);
      ch.lnf_rstd = k.stat(Nl);
      ch.losses = k.stat(N);
      ch.dlnf = k.take(Nl * C);
    }
    ch.acts_stride = k.off - a0;
    ch.stats_stride = k.soff - s0;
    ch.host_stride = k.hoff - h0;
    k.off = a0 + ch.sets * ch.acts_stride;
    k.soff = s0 + ch.sets * ch.stats_stride;
    k.hoff = h0 + ch.sets * ch.host_stride;
    o.chunks.push_back(ch);
  }
  o.stats_fixed = k.soff;
  if (tp > 1 && last) {
    o.logits = k.stat(N * vn);
    o.xmax = k.stat(N);
    o.xsums = k.stat(2 * N);
  }
  // Partial norm weight gradients summed over the group: sequence parallel
  // (2C: LayerNorm's weight and bias), and a QK-norm's over this rank's heads (2D).
  if (sp || (cfg.qk_norm() && tp > 1)) o.ln_grad = k.stat(2 * std::max(C, w.D));
  k.moe_fixed(o);
  if (w.kv_whole) o.kv_grad = k.stat(2 * cfg.kv_heads() * (w.D * C + w.D));  // the whole k and v weights and biases
  o.acts = k.off;
  o.stats = k.soff;
  const auto attn_ws =
      lowp ? kernels::bf16_ops_for(dev).attention_workspace_floats : kernels::ops_for(dev).attention_workspace_floats;
  const auto cls_ws =
      lowp ? kernels::bf16_ops_for(dev).classifier_workspace_floats : kernels::ops_for(dev).classifier_workspace_floats;
  o.ws = std::max({cp.size > 1 ? CpAttention::workspace_floats(cp, dev, B, T, Cl, NH, threads, lowp)
                               : attn_ws(B, T, Cl, NH, threads),
                   tp > 1 || !last ? 0 : cls_ws(N, cfg.vocab_size, threads)});
  k.off = 0;  // the scratch
  o.s_dres = k.take(Nl * C);
  o.s_tmp = k.take(Nl * C);
  // The backward's two wide temporaries: the MLP's hidden gradients, and
  // (Llama) attention's input gradient dqkv [N, 3 Cl].
  const int64_t wide = cfg.llama() ? std::max({w.mlp, w.shared, 3 * Cl}) : 4 * Cl;
  o.s_dfch = k.take(N * wide);
  o.s_dfch2 = k.take(N * wide);
  if (cfg.llama()) {
    o.s_qkvr = k.take(N * (Cl + 2 * w.kv()));
    if (cfg.qk_norm()) o.s_qkn = k.take(N * (Cl + w.kv()));
    o.s_dx2 = k.take(N * C);
  }
  if (sp) {
    o.s_full = k.take(N * C);
    o.s_gfull = k.take(N * C);
  }
  if (cp.size > 1) o.s_cp = k.take(CpAttention::scratch_elems(cp, B, T, Cl));
  k.moe_scratch(o);
  o.scratch = k.off;
  o.host = k.hoff;
  const int64_t es = lowp ? 2 : 4;
  o.sizes.activation_bytes = o.acts * es + o.stats * 4;
  o.sizes.scratch_bytes = o.scratch * es + o.ws * 4;
  return o;
}

Activations::Activations(ActivationPlan plan, Device dev, DType compute)
    : plan_(std::move(plan)), lowp_(compute == DType::BF16) {
  if (lowp_) {
    acts_lp_ = DeviceArray<bfloat16>(plan_.acts, MemCategory::Activations, dev);
    scratch_lp_ = DeviceArray<bfloat16>(plan_.scratch, MemCategory::Scratch, dev);
  } else {
    acts_ = DeviceArray<float>(plan_.acts, MemCategory::Activations, dev);
    scratch_ = DeviceArray<float>(plan_.scratch, MemCategory::Scratch, dev);
  }
  stats_ = DeviceArray<float>(plan_.stats, MemCategory::Activations, dev);
  host_.assign(static_cast<size_t>(plan_.host), 0.0f);
  ws_ = DeviceArray<float>(plan_.ws, MemCategory::Scratch, dev);
  for (const auto& ch : plan_.chunks) sets_.emplace_back(static_cast<size_t>(ch.sets));
}

void Activations::select(int chunk, int set) {
  const int chunks = static_cast<int>(plan_.chunks.size());
  PARALLM_CHECK(chunk >= 0 && chunk < chunks && set >= 0 && set < plan_.chunks[static_cast<size_t>(chunk)].sets,
                InternalError, "gpt", "chunk {} set {} outside this stage's {} chunks (set counts)", chunk, set,
                chunks);
  chunk_ = chunk;
  set_ = set;
  shift_a_ = set * chunk_acts().acts_stride;
  shift_s_ = set * chunk_acts().stats_stride;
  shift_h_ = set * chunk_acts().host_stride;
}

void* Activations::message(int64_t off) const {
  return lowp_ ? static_cast<void*>(act<bfloat16>(off)) : act<float>(off);
}

int Activations::max_sets() const {
  int m = 1;
  for (const auto& ch : plan_.chunks) m = std::max(m, ch.sets);
  return m;
}

}  // namespace parallm::model
