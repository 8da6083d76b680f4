// The tensors the numeric detector sees (model_watch.h). Going forward, a layer's
// weights (as the kernels read them: the compute type), then its outputs
// from the activation buffers kept for backward (ln_1, c_attn, attention,
// c_proj plus the residual, ln_2, c_fc, GELU, the block's output); going
// back, the layer's weight gradients (accumulated so far) and the gradient
// leaving it, d(input). Sizes are this rank's: its tensor-parallel shard,
// its rows under sequence parallelism.
#include "model/model_watch.h"

#include <string>

#include "model/numeric_watch.h"

namespace parallm::model {

namespace {
std::string block_name(int64_t l) {
  return "h." + std::to_string(l);
}
// A slot's name within its layer: "transformer.h.3.mlp.c_fc.weight" -> "mlp.c_fc.weight",
// "transformer.wte.weight" -> "wte.weight".
std::string tensor_name(const std::string& slot) {
  std::string t = slot.rfind("transformer.", 0) == 0 ? slot.substr(12) : slot;
  if (t.rfind("h.", 0) == 0) t = t.substr(t.find('.', 2) + 1);
  return t;
}
}  // namespace

template <class T>
void ModelWatch::slots(NumericWatch& w, std::initializer_list<int64_t> offsets, const T* base, int64_t p0,
                       const char* suffix) const {
  for (int64_t o : offsets) {
    if (o < 0) continue;
    const ParamSlot& s = layout_->slots()[static_cast<size_t>(layout_->unit_at(o))];
    w.add(tensor_name(s.name) + suffix, base + (o - p0), s.numel);
  }
}

template <class A>
void ModelWatch::embed(NumericWatch& w, const A* x, const A* PE, int64_t e0, const PassShape& f) const {
  w.begin("embed", false, f.ctx->micro_step);
  slots(w, {layout_->wte(), layout_->wpe()}, PE, e0, "");
  w.add("output", x, f.Nl * cfg_->n_embd);
  w.end();
}

template <class A>
void ModelWatch::block(NumericWatch& w, int64_t l, const A* P, int64_t p0, const PassShape& f) const {
  const auto& a = acts_->layer(l);
  const auto& bp = layout_->block(l);
  const int64_t N = f.N, Nl = f.Nl, C = cfg_->n_embd, Cl = C / layout_->spec().tp;
  w.begin(block_name(l), false, f.ctx->micro_step);
  slots(w,
        {bp.ln1_w, bp.ln1_b, bp.qkv_w, bp.qkv_b, bp.proj_w, bp.proj_b, bp.ln2_w, bp.ln2_b, bp.fc_w, bp.fc_b,
         bp.fcproj_w, bp.fcproj_b},
        P, p0, "");
  w.add("ln_1 output", acts_->act<A>(a.ln1), Nl * C);
  w.add("attn.c_attn output", acts_->act<A>(a.qkv), N * 3 * Cl);
  w.add("attn output", acts_->act<A>(a.atty), N * Cl);
  w.add("attn.c_proj output + residual", acts_->act<A>(a.res2), Nl * C);
  w.add("ln_2 output", acts_->act<A>(a.ln2), Nl * C);
  w.add("mlp.c_fc output", acts_->act<A>(a.fch), N * 4 * Cl);
  w.add("mlp.gelu output", acts_->act<A>(a.fch_gelu), N * 4 * Cl);
  w.add("output (mlp.c_proj output + residual)", acts_->act<A>(a.res3), Nl * C);
  w.end();
}

template <class A>
void ModelWatch::head(NumericWatch& w, const A* P, int64_t p0, bool loss, const PassShape& f) const {
  const int64_t Nl = f.Nl, C = cfg_->n_embd;
  if (!loss) {
    w.begin("ln_f", false, f.ctx->micro_step);
    slots(w, {layout_->lnf_w(), layout_->lnf_b()}, P, p0, "");
    w.add("output", acts_->act<A>(acts_->chunk_acts().lnf), Nl * C);
    w.end();
    return;
  }
  w.begin("lm_head", false, f.ctx->micro_step);
  w.add("losses", acts_->stat(acts_->chunk_acts().losses), f.N);
  if (f.ctx->need_grad) w.add("d(ln_f output)", acts_->act<A>(acts_->chunk_acts().dlnf), Nl * C);
  w.end();
}

template <class A>
void ModelWatch::grads(NumericWatch& w, int64_t l, const float* G, int64_t p0, const A* dres, BackwardPart part,
                       const PassShape& f) const {
  w.begin(l == cfg_->n_layer ? "ln_f" : block_name(l), true, f.ctx->micro_step);
  if (l == cfg_->n_layer) {
    slots(w, {layout_->lm_head(), layout_->lnf_b(), layout_->lnf_w()}, G, p0, " grad");
  } else {
    const auto& bp = layout_->block(l);
    // In backward order; the input half (B) leaves the linear layers' to the weight half (W).
    if (part != BackwardPart::Input) slots(w, {bp.fcproj_b, bp.fcproj_w, bp.fc_b, bp.fc_w}, G, p0, " grad");
    if (part != BackwardPart::Weight) slots(w, {bp.ln2_b, bp.ln2_w}, G, p0, " grad");
    if (part != BackwardPart::Input) slots(w, {bp.proj_b, bp.proj_w, bp.qkv_b, bp.qkv_w}, G, p0, " grad");
    if (part != BackwardPart::Weight) slots(w, {bp.ln1_b, bp.ln1_w}, G, p0, " grad");
  }
  if (dres) w.add("d(input)", dres, f.Nl * cfg_->n_embd);
  w.end();
}

void ModelWatch::embed_grads(NumericWatch& w, const float* GE, int64_t e0, const PassShape& f) const {
  w.begin("embed", true, f.ctx->micro_step);
  slots(w, {layout_->wpe(), layout_->wte()}, GE, e0, " grad");
  w.end();
}

#define PARALLM_WATCH(A)                                                                                    \
  template void ModelWatch::embed<A>(NumericWatch&, const A*, const A*, int64_t, const PassShape&) const;   \
  template void ModelWatch::block<A>(NumericWatch&, int64_t, const A*, int64_t, const PassShape&) const;    \
  template void ModelWatch::head<A>(NumericWatch&, const A*, int64_t, bool, const PassShape&) const;        \
  template void ModelWatch::grads<A>(NumericWatch&, int64_t, const float*, int64_t, const A*, BackwardPart, \
                                     const PassShape&) const;
PARALLM_WATCH(float)
PARALLM_WATCH(bfloat16)
#undef PARALLM_WATCH

}  // namespace parallm::model
