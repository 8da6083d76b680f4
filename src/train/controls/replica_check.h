// The replica check (train.check_replicas = N): every N iterations, after the
// update, the copies of a weight that must stay bitwise equal are compared by
// a 64-bit hash of each tensor, gathered over the group that holds them:
//   tensor-parallel ranks  each replicated tensor (norms, row-parallel biases);
//   data x context ranks   every tensor, where each rank holds the whole
//                          model (no ZeRO, or stages 1-2 after their gather);
//                          expert parallel, the experts over the expert-data
//                          ranks (those holding the same experts);
//   the pipeline's ends    the tied token table (the first stage's embedding,
//                          the last stage's head).
// A difference names the tensor, the group and the world ranks whose copies
// differ, and stops the run (InternalError: a bug in how the copies are
// updated, or a fault of the hardware). The losses cannot show it: a copy
// one rounding apart trains on for thousands of steps before it shows.
// Megatron-LM's --check-weight-hash-across-dp-replicas-interval compares the
// data-parallel replicas only; here every axis. ZeRO-3 holds one copy of each
// piece: nothing to compare. The cost: one read of this rank's weights and
// three gathers of a few words per tensor every N iterations.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "parallel/mesh.h"

namespace parallm::train {

class ReplicaCheck {
 public:
  // `interval` > 0; `whole_model`: every rank of the data x context group
  // holds every weight of its stage (false under ZeRO-3).
  ReplicaCheck(const parallel::Mesh& mesh, comm::Communicator& replicas, int64_t interval, bool whole_model);
  // After iteration `it`'s update: compares when (it + 1) % interval == 0.
  // Collective over the world (each group in turn); throws InternalError on
  // every rank of a group whose copies differ.
  void after_update(const model::GPT& m, int64_t it);
  // The comparison itself, whatever the iteration.
  void check(const model::GPT& m, int64_t it);
  // How many comparisons ran (for the log and the tests).
  int64_t checks() const { return checks_; }

 private:
  struct Group {
    comm::Communicator* comm = nullptr;
    std::string what;           // "tensor-parallel ranks", ...
    std::vector<size_t> slots;  // the model's slots compared over it
  };
  void compare(const Group& g, const model::GPT& m, const std::vector<uint64_t>& hashes, int64_t it) const;

  int world_rank_ = 0;
  int64_t interval_ = 1;
  int64_t checks_ = 0;
  bool whole_model_ = true;
  const parallel::Mesh& mesh_;
  comm::Communicator& replicas_;
};

}  // namespace parallm::train
