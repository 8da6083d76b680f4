// Checkpoints: a directory <out_dir>/ckpt (the best by val loss, or the
// latest with train.always_save_checkpoint) or <out_dir>/ckpt-NNNNNNNN (a
// step-numbered one, named after the iteration it resumes at; see
// ckpt_dirs.h for how they are kept and which one a resume picks), holding
//   model.bin  the flat parameter buffer (fp32)
//   optim.bin  AdamW first then second moments (fp32, same layout)
//   state.json format version, iteration, best val loss, optimizer step count,
//              dynamic loss scaling's state (scale, good steps, skipped steps),
//              the loss-spike guard's windows (train/controls/spike_guard.h),
//              the resolved config, the parameter table (names, shapes,
//              offsets), each file's size and CRC-32, and the CRC-32 of
//              state.json's own content (state_crc32).
// A sharded run (ZeRO) writes format 4 instead: every rank writes its own
//   shard-RRRRR-of-NNNNN.bin  its parameter pieces, then its m, then its v
// (rank r's piece of each layout group is comm::shard_of(group length, N, r),
// concatenated in group order), and state.json holds the manifest: per file,
// its CRC-32 and which flat ranges [flat, flat + count) it holds at which
// offset. Any run reads the ranges it needs from either format
// (read_checkpoint_range), so a checkpoint saved at one stage and world size
// resumes at any other and no rank ever holds more than it trains with. The
// directory must be visible to every rank (a shared filesystem on clusters).
// Every layout's checkpoint describes the whole model (the one-rank layout:
// the parameter table's shapes are the global shapes), so it resumes at any
// tp, pp, dp and ZeRO stage. Every layout saves through one writer
// (write_checkpoint) what it contributes: runs of the whole tensors
// (parallel/checkpoint_share.h) — replicated state gathered whole on rank 0
// (format 3), ZeRO shards by every rank, ZeRO x tp in whole layout groups
// (the dp group's ranks g % dp write group g, so no rank holds more than a
// whole group of one part besides what it trains with). One reader reads any
// range of any part (read_checkpoint_part: a tp or pp rank's part of the
// whole model).
// Formats 1 and 2, written before checksums, still load (unverified, with a
// warning).
// Integrity: read_checkpoint_meta checks state.json's structure and its own
// checksum, verify_checkpoint the files' checksums; a damaged checkpoint is
// an IoError naming the file, never a silent load.
// Saving is atomic: everything is written into a fresh sibling directory
// (<name>.tmp), flushed, then swapped in by rename (<name> -> <name>.old,
// <name>.tmp -> <name>, drop <name>.old), so a crash at any point leaves
// either the old or the new checkpoint, never a mix; a save that fails
// removes its partial directory. Every function below works on one such
// directory, a CkptDir; a plain run directory means its best one, ckpt. Data order and dropout masks are pure functions
// of (seed, step), so (weights, moments, step) is the whole state: a resumed run continues the identical trajectory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "parallel/checkpoint_share.h"

namespace parallm::train {

struct TrainState {
  int64_t iter = 0;  // next iteration to run
  double best_val_loss = 1e30;
  // Dynamic loss scaling's state (absent when the run did not scale dynamically).
  std::optional<optim::LossScaleState> loss_scale;
  // Metrics records the run could not write when it stopped on a write error
  // (an array, saved when not empty; a resumed run writes them: RunDir).
  nlohmann::json unwritten_records = nlohmann::json::array();
  // The loss-spike guard's state (SpikeGuardState::to_json(); null when the guard is off).
  nlohmann::json spike_guard = nullptr;
  // The layout that saved it: {"world", "dp", "tp", "pp", "cp", "sequences"}
  // (sequences an iteration, the global batch); null in older checkpoints.
  nlohmann::json layout = nullptr;
};

// One checkpoint directory <out_dir>/<name> and its siblings <name>.tmp
// (being written) and <name>.old (the one it replaces, during the swap).
struct CkptDir {
  // Implicit: a run directory stands for its best checkpoint, <out_dir>/ckpt.
  CkptDir(std::string run_dir, std::string dir_name = "ckpt")
      : out_dir(std::move(run_dir)), name(std::move(dir_name)) {}
  CkptDir(const char* run_dir) : CkptDir(std::string(run_dir)) {}
  std::string out_dir, name;
  std::string path() const { return (std::filesystem::path(out_dir) / name).string(); }
  std::string tmp() const { return path() + ".tmp"; }
  std::string old() const { return path() + ".old"; }
};

// The one writer: the checkpoint of the whole layout `whole` from every
// rank's share (parallel/checkpoint_share.h; the parallel plan makes a run's,
// ParallelPlan::checkpoint_share): each writer streams its runs of the
// parameters, then m, then v into its file(s), rank 0 writes the manifest and
// swaps the directory in. Collective over `world` (every rank of the run);
// a file or directory that cannot be written, on any rank, is an IoError on
// every rank naming that rank and its reason, and the partial directory is
// removed (a failure inside the share's own collectives is the
// communicator's error, as in any collective).
void write_checkpoint(comm::Communicator& world, const CkptDir& dir, const model::ParamLayout& whole,
                      const parallel::CheckpointShare& share, int64_t optimizer_steps, const TrainState& st,
                      const nlohmann::json& config);
// The same in three parts, for a save written in the background
// (train.async_save): stage_checkpoint (collective, at a step boundary) makes
// the tmp directory and copies this rank's files' contents into host memory,
// after which the training state may change; write_staged (no communication:
// any thread) writes and checksums them; finish_staged (collective) agrees on
// the outcome and swaps the checkpoint in, as write_checkpoint does.
struct StagedCheckpoint {
  CkptDir dir{""};
  model::ParamLayout whole;
  parallel::CheckpointShare share;  // its runs and writers (its data is not read again)
  int64_t optimizer_steps = 0;
  TrainState st;
  nlohmann::json config;
  int64_t pause_ms = 0;  // PARALLM_FAULT_SLOW_SAVE
  struct Files;
  std::unique_ptr<Files> files;
  StagedCheckpoint();
  ~StagedCheckpoint();
  StagedCheckpoint(StagedCheckpoint&&) noexcept;
  StagedCheckpoint& operator=(StagedCheckpoint&&) noexcept;
};
// `buffers`: host buffers to stage into (those of an earlier save, taken back
// by take_buffers: their capacity is kept, so a run's later saves copy into
// memory already mapped instead of faulting fresh pages in the step's time).
using StagingBuffers = std::vector<std::vector<float>>;
StagedCheckpoint stage_checkpoint(comm::Communicator& world, const CkptDir& dir, const model::ParamLayout& whole,
                                  const parallel::CheckpointShare& share, int64_t optimizer_steps, const TrainState& st,
                                  const nlohmann::json& config, StagingBuffers buffers = {});
void write_staged(StagedCheckpoint& c);
void finish_staged(comm::Communicator& world, StagedCheckpoint& c);
StagingBuffers take_buffers(StagedCheckpoint& c);
// Buffers of the sizes `share`'s files take on this rank, their pages mapped.
StagingBuffers staging_for(const parallel::CheckpointShare& share);
// One process's whole buffers (layout.total() floats each: parameters, then
// AdamW's first and second moments), through write_checkpoint.
void save_checkpoint(const CkptDir& dir, const model::ParamLayout& layout, const float* params, const float* m,
                     const float* v, int64_t optimizer_steps, const TrainState& st, const nlohmann::json& config);
// A model's parameters and its optimizer's moments as host floats: in place
// on the CPU, staged through `host` (3 x flat_size floats) from a GPU.
parallel::StateBuffers host_state(const model::GPT& m, const optim::AdamW& opt, std::vector<float>& host);
// The same for a one-rank model (its layout whole) and its optimizer, staged
// through the host from a GPU.
void save_checkpoint(const CkptDir& dir, const model::GPT& m, const optim::AdamW& opt, const TrainState& st,
                     const nlohmann::json& config);
// Reads state.json only (to rebuild the model with the saved config), and
// checks it: its structure, value ranges and own checksum (IoError naming
// the field otherwise).
nlohmann::json read_checkpoint_meta(const CkptDir& dir);
// Checks the CRC-32 of every file the checkpoint lists (with `params_only`,
// only those holding parameters): IoError naming the first damaged file. With
// a world of several ranks the files are shared out among the ranks, and
// every rank throws an IoError naming that file (the rank that read it gives
// the checksums, the others name that rank).
void verify_checkpoint(const nlohmann::json& meta, comm::Communicator* world = nullptr, bool params_only = false);
// Loads weights and optimizer state into an existing model/optimizer (a
// tensor-parallel model takes its part of the whole checkpoint); throws
// IoError naming the mismatch if the layout differs, a file is truncated or
// (with `verify`) does not match its checksum.
TrainState load_checkpoint(const CkptDir& dir, model::GPT& m, optim::AdamW* opt, bool verify = true);
// Into host buffers of layout.total() floats (m and v may both be null).
TrainState load_checkpoint(const CkptDir& dir, const model::ParamLayout& layout, float* params, float* m, float* v,
                           int64_t* optimizer_steps, bool verify = true);

using CkptPart = parallel::StatePart;  // Params, M, V
// Flat elements [begin, begin + count) of one part, from a checkpoint of
// either format (meta from read_checkpoint_meta).
void read_checkpoint_range(const nlohmann::json& meta, CkptPart part, int64_t begin, int64_t count, float* out);
// The same for a tensor-parallel rank: elements [begin, begin + count) of
// its layout `part` (a part of `whole`, the layout the checkpoint holds), each
// read from where it lies in the whole tensor; padding and alignment zero.
// Scattered runs (column-split slots: a run per row) are read through a window
// of at most 4 MiB of the whole tensor. With tp = 1 it is read_checkpoint_range.
void read_checkpoint_part(const nlohmann::json& meta, CkptPart part, const model::ParamLayout& layout,
                          const model::ParamLayout& whole, int64_t begin, int64_t count, float* out);
// IoError unless the checkpoint was saved for this layout.
void check_checkpoint_layout(const nlohmann::json& meta, const model::ParamLayout& layout);
// Iteration, best val loss and optimizer steps of a checkpoint.
TrainState checkpoint_state(const nlohmann::json& meta, int64_t* optimizer_steps);

}  // namespace parallm::train
