// A model as a spec of layers (Megatron-Core's block specs, torchtitan's
// per-family models): the embedding, the blocks (held ones only, by layer
// index), the final norm and the head, with the tensor split their linear
// layers share. Each family is a block kind (gpt2_block.h, llama_block.h);
// a Block holds one of them and forwards each pass to it, so the model's
// passes never ask which family runs. build() is the one place that maps a
// config's family to its layers.
#pragma once
#include <variant>
#include <vector>

#include "model/gpt2_block.h"
#include "model/llama_block.h"

namespace parallm::model {

class Block {
 public:
  Block() = default;
  template <class Kind>
  explicit Block(Kind b) : b_(std::move(b)) {}
  template <class A>
  void forward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
               const PassShape& f) const {
    std::visit([&](const auto& b) { b.forward(k, e, l, x, P, f); }, b_);
  }
  template <class A>
  void backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const A* x, const ParamView<A>& P,
                const GradView& G, const PassShape& f, bool redo, A* dres) const {
    std::visit([&](const auto& b) { b.backward(k, e, l, x, P, G, f, redo, dres); }, b_);
  }
  template <class A>
  void weight_backward(const kernels::ModelOps<A>& k, const BlockEnv& e, int64_t l, const ParamView<A>& P,
                       const GradView& G, const PassShape& f) const {
    std::visit([&](const auto& b) { b.weight_backward(k, e, l, P, G, f); }, b_);
  }
  void report_linear(const BlockEnv& e, const StepContext& ctx) const {
    std::visit([&](const auto& b) { b.report_linear(e, ctx); }, b_);
  }

 private:
  std::variant<Gpt2Block, LlamaBlock> b_;
};

struct ModelSpec {
  Embedding embed;
  std::vector<Block> blocks;
  Norm lnf;
  Head head;
  TensorSplit split;
  // The layers of `cfg`'s family on this rank: slots from the layout, widths
  // from the split; `attn` is this rank's attention layer.
  // `experts`: the MoE layers' groups (moe_layer.h; none: this rank alone).
  static ModelSpec build(const GPTConfig& cfg, const ParamLayout& layout, TensorSplit split, const Attention& attn,
                         ExpertPart experts = {});
};

}  // namespace parallm::model
