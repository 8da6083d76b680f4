// The model's context-parallel group (issue 36): the ranks that split each
// sequence between them (model/cp_layout.h says who holds which positions).
//
// As with TensorGroup, parallel/ implements it over the mesh's cp
// communicator and the model sees only what its attention needs, on buffers
// of its own device, so the model layer stays below comm/:
//   ring attention: K and V blocks passed to the next rank while the current
//     block is computed (start, compute, wait), and in backward their
//     gradients passed on the same way;
//   Ulysses: all-to-alls between sequence shards and head shards.
// A model without a group (nullptr) holds whole sequences.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "model/cp_layout.h"

namespace parallm::model {

class ContextGroup {
 public:
  virtual ~ContextGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // Starts sending send[0, n) to rank + 1 and receiving recv[0, n) from
  // rank - 1 (around the ring); `tag` tells concurrent exchanges apart.
  // wait_ring(tag) returns once both are done; the buffers are not touched
  // before that.
  virtual void start_ring(const float* send, float* recv, int64_t n, int tag) = 0;
  virtual void wait_ring(int tag) = 0;
  // Block j (n / size elements) of `in` goes to rank j; block i of `out`
  // comes from rank i.
  virtual void all_to_all(const float* in, float* out, int64_t n) = 0;
  virtual void all_to_all(const bfloat16* in, bfloat16* out, int64_t n) = 0;
};

// What a model needs to split its sequences: the group (null: whole
// sequences), the kind of attention exchange, and the split (zigzag: the
// balanced one; a contiguous ring is the baseline it is measured against).
struct ContextPart {
  ContextGroup* group = nullptr;
  CpKind kind = CpKind::Ring;
  bool zigzag = true;
  CpLayout layout() const {
    return group ? CpLayout{group->size(), group->rank(), kind, zigzag} : CpLayout{1, 0, kind, zigzag};
  }
};

}  // namespace parallm::model
