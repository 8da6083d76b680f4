// The run directory (train.out_dir), written by the lead rank only:
//   config.json    the resolved config
//   repro.json     what it takes to run it again (train/records/repro.h), of the
//                  latest attempt; repro-<n>.json: attempt n's (1 = the
//                  scratch run, then each resume), every one kept
//   meta.json      the dataset's vocabulary, so that `parallm sample` needs
//                  nothing but the run directory
//   metrics.jsonl  one JSON object per train step and per evaluation
//   events.out.tfevents.*  the same as TensorBoard scalars (train.tensorboard)
//   memory.json    peak bytes per category, after the first step
//   train.log      the log lines with timestamps, and the error that ended
//                  the run if one did
//   ckpt/          the best checkpoint (train/checkpoint/checkpoint.h)
//   ckpt-NNNNNNNN/ step-numbered checkpoints (train/checkpoint/ckpt_dirs.h), and
//   rolled_back/   the checkpoints a rollback (train.resume_step) set aside
// It is opened only once the config, the dataset and the prompt have been
// checked, so bad input changes nothing in an existing directory. A scratch
// run refuses a directory that holds any checkpoint unless
// train.overwrite=true (then every old checkpoint is deleted, so the directory
// never mixes two runs). A resumed run keeps the metrics of the steps before
// the one it resumes at and drops the later ones (written after the
// checkpoint it continues from), so metrics.jsonl reads as one run.
// Records are checked: a metrics, memory or log line that cannot be written
// (a full disk) is kept as write_error(), which the trainer polls every step
// to stop the run (after a best-effort checkpoint) instead of training on
// with its records lost. Leftovers of an interrupted save (the <name>.tmp of
// any checkpoint, *.tmp) are removed when a scratch or resumed run opens the
// directory, with a line saying what they were.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "train/config/config.h"
#include "train/records/metrics.h"
#include "train/records/tb_writer.h"

namespace parallm::train {

// Why a scratch run may not use cfg.out_dir ("" if it may): checkpoints are
// there (ckpt/, ckpt-*/ or their .old, readable or not; each is named) and
// train.overwrite is not set.
std::string scratch_refusal(const RunConfig& cfg);

class RunDir {
 public:
  enum class Mode {
    Scratch,   // a new run: log and metrics start empty; with train.overwrite the old checkpoint is deleted
    Resume,    // metrics of steps >= resume_iter are dropped (the run redoes them); the log goes on
    EvalOnly,  // appends its evaluation to metrics and log, rewrites nothing
    Records    // a finished run's checkpoint kept records (`carried`): writes them, nothing else
  };
  // `carried`: records a run that stopped on a write error could not write
  // (kept in its checkpoint); a resumed run writes them first.
  RunDir(const RunConfig& cfg, Mode mode, int64_t resume_iter, const nlohmann::json& carried = nlohmann::json::array());
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  void write_metrics(const nlohmann::json& record) {
    metrics_->write(record);
    if (tb_) tb_->write_record(record);
  }
  void write_memory(const nlohmann::json& record);
  // `record` as repro-<n>.json, n one more than the last attempt's here, and
  // as repro.json, with "attempt": n.
  void write_repro(nlohmann::json record);
  // "" while every record was written; else the first failure.
  std::string write_error() const;
  // The metrics records that could not be written (an array).
  const nlohmann::json& unwritten_metrics() const { return metrics_->unwritten(); }
  // Records the error that ends the run in train.log (never throws).
  static void log_error(const std::string& what);

 private:
  struct LogAttach {  // train.log, detached however the run ends (also if opening the rest fails)
    LogAttach(const std::string& path, bool truncate);
    ~LogAttach();
    LogAttach(const LogAttach&) = delete;
    LogAttach& operator=(const LogAttach&) = delete;
  };
  std::string dir_;
  LogAttach log_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TbWriter> tb_;  // train.tensorboard
  std::string memory_error_;
};

}  // namespace parallm::train
