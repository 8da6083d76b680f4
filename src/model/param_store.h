// Where a sharded run keeps the model's parameters and gradients.
//
// Without a store the model reads its own flat parameter buffer and
// accumulates into its own flat gradient buffer. With one (ZeRO, see
// parallel/zero.h) it asks, group by group (ParamLayout groups: embeddings,
// then one per transformer block), for the group's parameters just before it
// reads them and for the group's gradient buffer just before it writes it,
// and says when it is done with each. That is all a store needs to gather
// parameters on demand, prefetch the next group, free a group after use, and
// reduce-scatter a group's gradients as soon as backward has finished them.
// Pointers are to the group's first element (offset group(g).begin in the
// flat layout) and stay valid until the matching release / done call.
#pragma once

namespace parallm::model {

enum class Pass { Forward, Backward };

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  // Group g's parameters, for reading during `pass`.
  virtual const float* params(int g, Pass pass) = 0;
  // The model will not read group g's parameters again in this pass.
  virtual void release_params(int g, Pass pass) = 0;
  // Group g's gradient buffer for this micro-step (the model accumulates +=).
  virtual float* grads(int g) = 0;
  // Group g's gradients of this micro-step are final.
  virtual void grads_done(int g) = 0;
};

}  // namespace parallm::model
