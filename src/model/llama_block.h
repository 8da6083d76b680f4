// The Llama family's transformer block (Llama 3, Qwen3), built from the layers
// of layers.h beside GPT-2's (gpt2_block.h), with the same passes:
//   h   = x + drop(o(attn(rope_pack(qkn(q(n1)), qkn(k(n1)), v(n1)))))   n1 = rmsnorm1(x)
//   out = h + drop(down(silu(gate(n2)) * up(n2)))                       n2 = rmsnorm2(h)
// or, in an MoE block, out = h + drop(moe(n2)) (moe_layer.h).
// q, k and v are column-parallel linears over one gathered input (as are gate
// and up); RoPE and the grouped-query expansion are one kernel into the
// attention kernel's qkv; Qwen3's QK-norm is an RMSNorm over each head.
//
// Where there are fewer KV heads than tensor-parallel ranks (tp a multiple of
// n_kv_head), k and v are whole on every rank and each rank computes the one
// KV head its query heads use; their weight gradients are then partial sums,
// summed over the group once per micro-batch (kv_grad).
#pragma once
#include <cstdint>

#include "model/gpt2_block.h"
#include "model/moe_layer.h"

namespace parallm::model {

class LlamaBlock {
 public:
  LlamaBlock() = default;
  // Block `bp`'s slots with this rank's widths.
  // `moe`: the MoE layer in place of the MLP (an inactive one: the dense MLP).
  LlamaBlock(const BlockParams& bp, const GPTConfig& cfg, const BlockWidths& w, const Attention& attn,
             const MoeLayer& moe = {});
  template <class A>
  void forward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
               const PassShape& f) const;
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
                const GradView& G, const PassShape& f, bool redo, A* dres) const;
  template <class A>
  void weight_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const ParamView<A>& P,
                       const GradView& G, const PassShape& f) const;
  void report_linear(const BlockEnv& e, const StepContext& ctx) const;

 private:
  struct Layers {
    Norm ln1, ln2, q_norm, k_norm;
    ColumnLinears qkv, gate_up;
    Attention attn;
    RowLinear proj, down;
    MoeLayer moe;
  };
  bool moe_ = false;                     // the MLP is a mixture of experts
  BlockParams bp_{};                     // the slots (for the gradient-ready reports)
  int64_t H_ = 0, KV_ = 0, D_ = 0;       // this rank's query heads, KV heads, head size
  bool kv_whole_ = false;                // k and v replicated: their weight gradients summed over the group
  int64_t kv_total_ = 0, first_kv_ = 0;  // the model's KV heads, the one this rank uses (kv_whole_)
  Layers layers_;
  template <class A>
  void attention_input(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const ParamView<A>& P,
                       const PassShape& f) const;
  template <class A>
  void attention_input_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const ParamView<A>& P,
                                const GradView& G, const PassShape& f, const A* dqkv, A* dx) const;
  template <class A>
  void sum_kv_grads(const kernels::ModelOps<A>& k, const BlockEnv& e, const A* const* dkv, const A* x,
                    const ParamView<A>& P, const GradView& G, int64_t N) const;
};

}  // namespace parallm::model
