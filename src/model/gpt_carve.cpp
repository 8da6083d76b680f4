// The model's buffer layout (gpt.h): every activation, statistic, scratch and
// workspace offset for a (B, T), computed in one place, so the constructor's
// allocation and the planner's prediction (GPT::buffers) cannot disagree.
//
// Activations (and backward's temporaries) are in the compute type;
// LayerNorm statistics, log-sum-exps, losses and kernel workspaces are fp32.
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
#include <omp.h>

#include <algorithm>

#include "kernels/ops.h"
#include "model/gpt.h"

namespace parallm::model {

GPT::Buffers GPT::buffers(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev, int threads,
                          DType compute, int tp, bool sequence_parallel, const PipelinePart& pipe, const CpLayout& cp) {
  return carve(cfg, max_batch, max_seq, dev, threads, compute, tp, sequence_parallel && tp > 1, pipe, cp).sizes;
}

GPT::Carve GPT::carve(const GPTConfig& cfg, int64_t B, int64_t T, Device dev, int threads, DType compute, int tp,
                      bool sp, const PipelinePart& pipe, const CpLayout& cp) {
  const int64_t N = B * T, C = cfg.n_embd, L = cfg.n_layer, Nl = sp ? N / tp : N;
  const int64_t Cl = C / tp, NH = cfg.n_head / tp, vn = (cfg.vocab_size + tp - 1) / tp;
  const std::vector<LayerRange> chunks = pipe.pipelined() ? pipe.stage.chunks : std::vector<LayerRange>{{0, L}};
  const bool last = chunks.back().end == L;
  const bool lowp = compute == DType::BF16 && !dev.is_cpu();  // CPU bf16 keeps fp32 activations
  int64_t off = 0, soff = 0;
  auto take = [&](int64_t n) {
    int64_t o = off;
    off += (n + 15) / 16 * 16;
    return o;
  };
  auto stat = [&](int64_t n) {
    int64_t o = soff;
    soff += (n + 15) / 16 * 16;
    return o;
  };
  Carve o;
  o.la.assign(static_cast<size_t>(L), LayerActs{});
  // Recomputed buffers are one set shared by every layer (refilled before
  // each layer's backward): selective the LayerNorm and GELU outputs, full
  // everything but the block's output (the next block's input).
  const bool sel = cfg.recompute == Recompute::Selective, full = cfg.recompute == Recompute::Full;
  LayerActs shared{};
  if (sel || full) {
    shared.ln1 = take(Nl * C);
    shared.ln2 = take(Nl * C);
    shared.fch_gelu = take(N * 4 * Cl);
  }
  if (full) {
    shared.qkv = take(N * 3 * Cl);
    shared.atty = take(N * Cl);
    shared.res2 = take(Nl * C);
    shared.fch = take(N * 4 * Cl);
    if (const int64_t h = CpAttention::head_out_elems(cp, B, T, Cl)) shared.att_h = take(h);
  }
  if (tp > 1 && last && lowp) o.dlogits = take(N * vn);  // fp32 computes d(logits) over the logits
  o.acts_sets = off;
  for (size_t c = 0; c < chunks.size(); ++c) {
    ChunkActs ch;
    ch.sets = pipe.in_flight.empty() ? 1 : std::max(1, pipe.in_flight[c]);
    const int64_t a0 = off, s0 = soff;
    ch.input = take(Nl * C);
    if (pipe.pipelined()) ch.grad = take(Nl * C);
    for (int64_t l = chunks[c].begin; l < chunks[c].end; ++l) {
      LayerActs a = shared;
      if (!sel && !full) a.ln1 = take(Nl * C);
      a.ln1_mean = stat(Nl);
      a.ln1_rstd = stat(Nl);
      if (!full) a.qkv = take(N * 3 * Cl);
      if (!full) a.atty = take(N * Cl);
      if (const int64_t h = CpAttention::head_out_elems(cp, B, T, Cl); h && !full) a.att_h = take(h);
      a.lse = stat(B * NH * T);
      if (!full) a.res2 = take(Nl * C);
      if (!sel && !full) a.ln2 = take(Nl * C);
      a.ln2_mean = stat(Nl);
      a.ln2_rstd = stat(Nl);
      if (!full) a.fch = take(N * 4 * Cl);
      if (!sel && !full) a.fch_gelu = take(N * 4 * Cl);
      a.res3 = take(Nl * C);
      if (pipe.split_backward) {
        a.d_fcproj = take(N * C);
        a.d_fc = take(N * 4 * Cl);
        a.d_proj = take(N * C);
        a.d_qkv = take(N * 3 * Cl);
      }
      o.la[static_cast<size_t>(l)] = a;
    }
    if (last && c + 1 == chunks.size()) {
      ch.lnf = take(Nl * C);
      ch.lnf_mean = stat(Nl);
      ch.lnf_rstd = stat(Nl);
      ch.losses = stat(N);
      ch.dlnf = take(Nl * C);
    }
    ch.acts_stride = off - a0;
    ch.stats_stride = soff - s0;
    off = a0 + ch.sets * ch.acts_stride;
    soff = s0 + ch.sets * ch.stats_stride;
    o.chunks.push_back(ch);
  }
  o.stats_fixed = soff;
  if (tp > 1 && last) {
    o.logits = stat(N * vn);
    o.xmax = stat(N);
    o.xsums = stat(2 * N);
  }
  if (sp) o.ln_grad = stat(2 * C);
  o.acts = off;
  o.stats = soff;

  const auto attn_ws =
      lowp ? kernels::bf16_ops_for(dev).attention_workspace_floats : kernels::ops_for(dev).attention_workspace_floats;
  const auto cls_ws =
      lowp ? kernels::bf16_ops_for(dev).classifier_workspace_floats : kernels::ops_for(dev).classifier_workspace_floats;
  o.ws = std::max({cp.size > 1 ? CpAttention::workspace_floats(cp, dev, B, T, Cl, NH, threads, lowp)
                               : attn_ws(B, T, Cl, NH, threads),
                   tp > 1 || !last ? 0 : cls_ws(N, cfg.vocab_size, threads)});
  off = 0;
  o.s_dres = take(Nl * C);
  o.s_tmp = take(Nl * C);
  o.s_dfch = take(N * 4 * Cl);
  o.s_dfch2 = take(N * 4 * Cl);
  if (sp) {
    o.s_full = take(N * C);
    o.s_gfull = take(N * C);
  }
  if (cp.size > 1) o.s_cp = take(CpAttention::scratch_elems(cp, B, T, Cl));
  o.scratch = off;
  const int64_t es = lowp ? 2 : 4;
  o.sizes.activation_bytes = o.acts * es + o.stats * 4;
  o.sizes.scratch_bytes = o.scratch * es + o.ws * 4;
  return o;
}

}  // namespace parallm::model
