// The training state between a run and its checkpoint. A save asks the
// parallel plan what this rank contributes (ParallelPlan::checkpoint_share:
// runs of the whole tensors) and hands it to the one writer
// (write_checkpoint); the checkpoint always holds the whole (one-rank)
// layout, so it resumes at any layout. On resume, replicated state is read by
// the gradient group's rank 0 (each tensor or pipeline part its part of the
// whole model) and broadcast over the group; sharded state (ZeRO) is read
// range by range by every rank, from a checkpoint of any stage and world
// size. The few scalars a run continues from (iteration, best val loss,
// optimizer steps, loss scale, the loss-spike guard's windows) are rank 0's,
// everywhere.
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
// The checkpoint of the state before iteration `next`: collective over the
// world (every rank calls it), and once it returns on any rank the checkpoint
// stands (a failure is an IoError on every rank). Returns the directory written.
// `background` (a periodic save) with train.async_save: the state is staged in
// host memory (collective) and written by a background thread while training
// goes on; it stands once settle_saves completes it. Any save first completes
// the one in flight (at most one).
std::string save_state(Session& s, int64_t next, SaveSlot slot = SaveSlot::Best, bool background = false);
// The background save in flight, if any, completed where every rank's write
// has finished (agreed over the world: collective, each step) or, with `wait`,
// once they have: its outcome agreed, the checkpoint swapped in (an IoError on
// every rank naming what failed, the previous checkpoint kept).
void settle_saves(Session& s, bool wait);
// train.async_save: this rank's staging buffers allocated and their pages
// mapped before the first step, so no save's copy waits for fresh memory.
void prepare_background_saves(Session& s);

}  // namespace parallm::train
