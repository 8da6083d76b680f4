// The one map from a config's family to its layers (model_spec.h).
#include "model/model_spec.h"

namespace parallm::model {

ModelSpec ModelSpec::build(const GPTConfig& cfg, const ParamLayout& layout, TensorSplit split, const Attention& attn,
                           ExpertPart experts) {
  const int64_t C = cfg.n_embd;
  const BlockWidths w = block_widths(cfg, split.size(), split.rank());
  ModelSpec s;
  s.split = std::move(split);
  s.blocks.assign(static_cast<size_t>(cfg.n_layer), Block{});
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    if (!layout.holds_block(l)) continue;
    const BlockParams& bp = layout.block(l);
    s.blocks[static_cast<size_t>(l)] =
        cfg.llama() ? Block(LlamaBlock(bp, cfg, w, attn, bp.moe() ? MoeLayer(bp, cfg, w, experts) : MoeLayer{}))
                    : Block(Gpt2Block(bp, C, w.attn(), attn));
  }
  s.lnf = Norm{layout.lnf_w(), layout.lnf_b(), C, cfg.llama(), cfg.rms_norm_eps};
  s.embed = Embedding{layout.wte(), layout.wpe(), C, layout.vocab_rows()};
  s.head = Head{layout.head(), C, cfg.vocab_size, layout.vocab_rows()};
  return s;
}

}  // namespace parallm::model
