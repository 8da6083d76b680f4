// The checkpoints of a run directory (train.out_dir) and which one a resume
// takes. A run keeps
//   ckpt/            the best checkpoint (by val loss, or the latest with
//                    train.always_save_checkpoint), as always;
//   ckpt-NNNNNNNN/   step-numbered ones, named after the iteration they
//                    resume at (8 digits or more), written every
//                    train.checkpoint_interval iterations, by the switches,
//                    signals and time limit, and after the last iteration
//                    (ckpt-<max_iters + 1>: a finished run); after each
//                    one is saved, those beyond the newest
//                    train.keep_checkpoints are deleted (the best one never
//                    is);
// each written through its own <name>.tmp and swapped in via <name>.old
// (checkpoint.h), so a process killed at any moment of a save leaves every
// earlier checkpoint as it was.
// A resume takes the newest intact checkpoint: the candidates (ckpt and every
// ckpt-*, or the <name>.old a crash between the two renames left alone),
// ordered by the iteration their state.json holds, newest first (the best one
// before a step-numbered one of the same iteration), are checked in turn:
// state.json's structure and own checksum, then every file's CRC-32
// (collectively, as verify_checkpoint does). The first that passes on every
// rank is taken, and each one passed over is named in a warning, "skipping
// <dir>: <reason>". Rank 0 lists and orders the candidates and every rank
// follows its list, so all ranks decide on the same directory. With
// train.resume_step=K only the checkpoints of iteration K are candidates (a
// rollback), and the checkpoints newer than K are moved into rolled_back/ so
// the rolled-back run's own checkpoints are the newest from then on.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/checkpoint/checkpoint.h"

namespace parallm::train {

// <out_dir>/ckpt-<next, 8 digits>: the step-numbered checkpoint saved before iteration `next`.
CkptDir step_checkpoint(const std::string& out_dir, int64_t next);
// The checkpoint a state.json read by read_checkpoint_meta came from.
CkptDir checkpoint_of(const nlohmann::json& meta);
// The names of the checkpoints in `out_dir` ("ckpt", "ckpt-00000120", ...),
// including one that only its .old sibling holds; sorted by name.
std::vector<std::string> checkpoint_names(const std::string& out_dir);
// Whether `name` is a step-numbered checkpoint's (ckpt-NNNNNNNN), and its iteration.
std::optional<int64_t> step_of(const std::string& name);
// Deletes the step-numbered checkpoints beyond the newest `keep` (by iteration).
void prune_step_checkpoints(const std::string& out_dir, int64_t keep);

struct ChooseOptions {
  std::optional<int64_t> at_iter;  // train.resume_step: only checkpoints of this iteration
  bool best_first = false;         // the best checkpoint first, whatever its iteration (sampling)
  bool params_only = false;        // verify only the files holding parameters (sampling)
};
// The state.json (read_checkpoint_meta's) of the checkpoint a resume takes
// (see above); collective over `world` when given (every rank calls it and
// gets the same one). IoError naming each candidate and why when none is
// intact; ConfigError naming train.resume_step, with the iterations there
// are, when no checkpoint has the iteration asked for.
nlohmann::json choose_checkpoint(const std::string& out_dir, comm::Communicator* world, const ChooseOptions& o = {});

// Moves the checkpoints of iterations after `iter` into <out_dir>/rolled_back/
// (a rollback), saying which.
void set_aside_newer(const std::string& out_dir, int64_t iter);

}  // namespace parallm::train
