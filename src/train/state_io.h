// The training state between a run and its checkpoint: what the gradient
// sync says this rank holds (held()) decides the form. Replicated state is
// saved by rank 0 and, on resume, read by rank 0 and broadcast over the
// data-parallel group (a tensor-parallel model is gathered whole on rank 0 to
// be saved, and each rank reads its part); sharded state (ZeRO) is saved by every rank in its
// shard file and read back range by range, from a checkpoint of any stage
// and world size. Sharded state with tensor parallelism is saved in the whole
// (one-rank) layout, assembled one layout group at a time: group g's pieces
// are gathered over the dp group on its rank g % dp and then over that rank's
// tp group on tp rank 0, which appends it to its shard file (the dp ranks of
// tp rank 0 write; besides its training state a rank holds at most one group
// of its part, a writer also the tp parts of a whole group and the whole
// group). Any tp, dp and stage resumes it, each tp rank reading its part of
// every range. The few scalars a run continues from (iteration, best val
// loss, optimizer steps, loss scale, the loss-spike guard's windows) are rank 0's, everywhere.
// A save goes to one of two slots (checkpoint.h, ckpt_dirs.h): the best
// checkpoint <out_dir>/ckpt, or a step-numbered <out_dir>/ckpt-NNNNNNNN, after
// which the step-numbered ones beyond train.keep_checkpoints are deleted.
#pragma once
#include <cstdint>
#include <string>

#include "train/session.h"

namespace parallm::train {

// A resumed run's weights, optimizer state and scalars (every rank).
void restore_state(Session& s);
// train.init_from=hf:DIR: every rank reads its part of the weights from the
// Hugging Face directory (hf/hf_gpt2.h); the optimizer starts fresh.
void load_hf_weights(Session& s);
enum class SaveSlot {
  Best,  // <out_dir>/ckpt: the best by val loss (or the latest, with train.always_save_checkpoint)
  Step   // <out_dir>/ckpt-<next, 8 digits>: kept beside the best one, the newest train.keep_checkpoints of them
};
// The checkpoint of the state before iteration `next` (collective when the
// state is sharded; every rank calls it). Returns the directory written.
std::string save_state(Session& s, int64_t next, SaveSlot slot = SaveSlot::Best);
// Whether this rank's save stands for the checkpoint (rank 0, or every rank of a sharded state).
bool saves_state(const Session& s);

}  // namespace parallm::train
