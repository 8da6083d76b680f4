// The model's activation memory: every activation, statistic, scratch and
// workspace buffer for the largest (B, T) it will see, planned in one place
// (ActivationPlan::carve) so the constructor's allocation and the planner's
// prediction (GPT::buffers) cannot disagree, and allocated once, so a step
// allocates nothing.
//
// Activations (and backward's temporaries) are in the compute type;
// LayerNorm statistics, log-sum-exps, losses and kernel workspaces are fp32.
// A pipeline stage keeps one activation set per micro-batch its schedule
// holds in flight, per chunk; select(chunk, set) makes act()/stat() address
// that set's buffers (the offsets of set 0 shifted), while recompute's shared
// buffers and the loss's transients exist once.
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/device_array.h"
#include "kernels/bf16.h"
#include "model/config.h"
#include "model/cp_layout.h"
#include "model/stage.h"

namespace parallm::model {

// The activation and scratch bytes a model of a shape allocates.
struct ActivationBytes {
  int64_t activation_bytes = 0, scratch_bytes = 0;
};

// One block's buffers (offsets into the activation set 0).
struct LayerActs {
  int64_t ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res3;
  int64_t att_h = -1;  // Ulysses: the head-form attention output [B, T, Cl/cp]
  // Llama: the up projection [N, F] (fch is the gate's, fch_gelu SwiGLU's
  // output), QK-norm's inputs q | k [N, A + K] and its rstd (N x heads + N x KV heads).
  int64_t up = -1, qk_pre = -1, qk_rstd = -1;
  // split_backward: B's gradients of the linear layers' outputs, kept for W
  // (fcproj, proj: whole rows; fc (after GELU's backward), qkv: this rank's columns).
  int64_t d_fcproj = -1, d_fc = -1, d_proj = -1, d_qkv = -1;
  int64_t d_up = -1;  // Llama: up's (d_fc: gate's; d_qkv: q | k | v's before RoPE)
  // An MoE block (moe_layer.h; fch, up, fch_gelu: its shared experts'). The
  // router's logits [N, E], the permuted rows [NK, C] (N K = N x top_k), the
  // experts' gate, up and SwiGLU outputs [NK, F] and outputs [NK, C];
  // statistics: weights, expert ids, slots and sources [NK], lse [N], the
  // counts' sum over the data group [2E + 2]; on the host the ids, slots,
  // sources, each expert's first row [E + 1] and the global counts [E].
  // Expert parallel (ep > 1), the experts run over the rows they receive
  // (R = ep x NK at most, expert-major: xe, hg, hu, ha), and the host keeps
  // the counts received [E] (source rank i's rows for local expert x at
  // i El + x). Without it xe is xp.
  struct Moe {
    int64_t logits = -1, xp = -1, xe = -1, hg = -1, hu = -1, ha = -1, yp = -1;
    int64_t w = -1, ids = -1, slot = -1, src = -1, lse = -1, sums = -1;
    int64_t h_ids = -1, h_slot = -1, h_src = -1, h_off = -1, h_counts = -1, h_recv = -1;
  } moe;
};

// A chunk's own buffers in its activation set 0 (set s is `acts_stride` /
// `stats_stride` further): its input (the embedding's output on the first
// chunk), the gradient message (pipelined), and on the model's last chunk
// ln_f, the losses and d(ln_f output).
struct ChunkActs {
  int64_t input = 0, grad = -1, lnf = -1, lnf_mean = -1, lnf_rstd = -1, losses = -1, dlnf = -1;
  int64_t acts_stride = 0, stats_stride = 0, host_stride = 0;
  int sets = 1;
};

// Every buffer offset for a (B, T), and the totals: means, rstds, lse and
// losses index the statistics, the rest the activations (s_* the scratch).
// Per-set offsets (la, chunks) are those of set 0: activations from
// `acts_sets` on and statistics below `stats_fixed` move with the set;
// recompute's shared buffers (before acts_sets) and the loss's transients
// (from stats_fixed) do not.
struct ActivationPlan {
  std::vector<LayerActs> la;  // by layer (held ones)
  std::vector<ChunkActs> chunks;
  int64_t acts_sets = 0, stats_fixed = 0;
  int64_t logits = 0, xmax = 0, xsums = 0, dlogits = 0;  // vocabulary-parallel loss (tp > 1)
  int64_t s_full = 0, s_gfull = 0, ln_grad = 0;          // sequence parallel: whole-row buffers, LayerNorm grads
  int64_t s_dres = 0, s_tmp = 0, s_dfch = 0, s_dfch2 = 0;
  int64_t s_cp = 0;  // context parallel: the attention exchange's buffers
  // Llama: q | k | v before packing (forward; backward their gradients),
  // QK-norm's outputs (backward: its input gradients), a second input
  // gradient for the column groups' sums; kv_grad (stats): a replicated KV
  // head's weight gradients before their sum over the group.
  int64_t s_qkvr = -1, s_qkn = -1, s_dx2 = -1, kv_grad = -1;
  // MoE backward: two [R, C] and one [2 R, F] buffer, d(logits) [N, E];
  // stats: d(weights) [NK] and the auxiliary loss's gradient [E]; a host
  // copy of the logits (GPU: the balancing loss's value). Expert parallel:
  // the exchange's reorderings [2 R] (stats, as int32) and their host copy,
  // and the counts sent [E] (stats).
  int64_t s_moe_a = -1, s_moe_b = -1, s_moe_f = -1, s_moe_z = -1, moe_dw = -1, moe_aux = -1, h_logits = -1;
  int64_t moe_perm = -1, h_perm = -1, moe_counts = -1;
  int64_t acts = 0, stats = 0, scratch = 0, ws = 0, host = 0;  // element counts
  ActivationBytes sizes;

  // Context parallel, T is the local length.
  static ActivationPlan carve(const GPTConfig& cfg, int64_t B, int64_t T, Device dev, int threads, DType compute,
                              int tp, bool sp, const PipelinePart& pipe, const CpLayout& cp, int ep = 1);
};

class Activations {
 public:
  Activations() = default;
  // Allocates the plan's buffers on `dev` in the compute type (bf16: the
  // activations and scratch; statistics and workspaces stay fp32).
  Activations(ActivationPlan plan, Device dev, DType compute);
  const ActivationPlan& plan() const { return plan_; }

  // From now on act()/stat() address chunk `chunk`'s activation set `set`.
  void select(int chunk, int set);
  int chunk() const { return chunk_; }
  int set() const { return set_; }
  const ChunkActs& chunk_acts() const { return plan_.chunks[static_cast<size_t>(chunk_)]; }
  const LayerActs& layer(int64_t l) const { return plan_.la[static_cast<size_t>(l)]; }

  template <class A>
  A* act(int64_t off) const {
    return of_type<A>(acts_, acts_lp_, off >= plan_.acts_sets ? off + shift_a_ : off);
  }
  template <class A>
  A* scr(int64_t off) const {
    return of_type<A>(scratch_, scratch_lp_, off);
  }
  // An absent statistic (-1: RMSNorm's mean) is null.
  float* stat(int64_t off) const {
    return off < 0 ? nullptr : stats_.data() + (off < plan_.stats_fixed ? off + shift_s_ : off);
  }
  float* ws() const { return ws_.data(); }
  // Host memory of the selected set (MoE routing's bookkeeping), as floats or 32-bit ints.
  float* host(int64_t off) const { return off < 0 ? nullptr : host_.data() + off + shift_h_; }
  int32_t* host_i32(int64_t off) const { return reinterpret_cast<int32_t*>(host(off)); }
  float* host_fixed(int64_t off) const { return off < 0 ? nullptr : host_.data() + off; }
  // The MoE layers' tally since the last take_moe_tally(): balancing and
  // z-loss values summed over the training passes and their layers, and the
  // tokens each expert got (choices, summed over the data group) by layer:
  // tokens[l E + e] (every layer's row, zero for a dense or not held one);
  // `choices`: this rank's tokens' choices, each token's 64-bit hash of its
  // global (micro-step, sample, position), layer and choices, in a wrapping
  // sum (the same for any split of the batch once summed over the ranks).
  struct MoeTally {
    double aux = 0, z = 0;
    double dropped = 0;  // choices the capacity dropped (summed over the data group)
    std::vector<double> tokens;
    uint64_t choices = 0;
  };
  MoeTally& moe_tally() { return tally_; }
  // The selected chunk's and set's activation set: the input of the selected
  // chunk as a message, in the compute type (void: either type).
  void* message(int64_t off) const;

  // Per chunk and set: the batch shape of its forward and whether its backward
  // may follow (forward with need_grad, backward not run yet) / its weight half.
  struct SetState {
    int64_t B = 0, T = 0;
    bool grads_ready = false, weights_pending = false;
  };
  SetState& state() { return sets_[static_cast<size_t>(chunk_)][static_cast<size_t>(set_)]; }
  int max_sets() const;

 private:
  template <class A>
  static A* of_type(const DeviceArray<float>& f32, const DeviceArray<bfloat16>& lp, int64_t off) {
    if constexpr (std::is_same_v<A, float>)
      return f32.data() + off;
    else
      return lp.data() + off;
  }
  ActivationPlan plan_;
  bool lowp_ = false;
  DeviceArray<float> acts_, scratch_;
  DeviceArray<bfloat16> acts_lp_, scratch_lp_;
  DeviceArray<float> stats_, ws_;
  mutable std::vector<float> host_;
  MoeTally tally_;
  int chunk_ = 0, set_ = 0;
  int64_t shift_a_ = 0, shift_s_ = 0, shift_h_ = 0;
  std::vector<std::vector<SetState>> sets_;
};

}  // namespace parallm::model
