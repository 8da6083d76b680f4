// The model's side of the numeric detector (numeric_watch.h): which tensors
// of each layer the watch sees, in the order they are computed, so the first
// non-finite frame is the first tensor that went bad. A view of the model's
// layout and activation buffers; the passes call it where a layer finishes.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "model/activations.h"
#include "model/config.h"
#include "model/params.h"
#include "model/pass.h"
#include "model/stage.h"

namespace parallm::model {

class NumericWatch;

class ModelWatch {
 public:
  ModelWatch() = default;
  ModelWatch(const GPTConfig* cfg, const ParamLayout* layout, const Activations* acts)
      : cfg_(cfg), layout_(layout), acts_(acts) {}

  // Forward: a layer's weights (`P`, laid out from flat offset p0), then its outputs.
  template <class A>
  void embed(NumericWatch& w, const A* x, const A* PE, int64_t e0, const PassShape& f) const;
  template <class A>
  void block(NumericWatch& w, int64_t l, const A* P, int64_t p0, const PassShape& f) const;
  // ln_f (loss false) or the head's losses and d(ln_f output) (loss true).
  template <class A>
  void head(NumericWatch& w, const A* P, int64_t p0, bool loss, const PassShape& f) const;
  // Backward: block l's (l = n_layer: ln_f's and lm_head's) weight gradients so far, then d(input) `dres`.
  template <class A>
  void grads(NumericWatch& w, int64_t l, const float* G, int64_t p0, const A* dres, BackwardPart part,
             const PassShape& f) const;
  void embed_grads(NumericWatch& w, const float* GE, int64_t e0, const PassShape& f) const;

 private:
  // `offsets` names parameters by flat offset in a buffer `base` that begins at flat offset p0 (-1: absent).
  template <class T>
  void slots(NumericWatch& w, std::initializer_list<int64_t> offsets, const T* base, int64_t p0,
             const char* suffix) const;
  const GPTConfig* cfg_ = nullptr;
  const ParamLayout* layout_ = nullptr;
  const Activations* acts_ = nullptr;
};

}  // namespace parallm::model
