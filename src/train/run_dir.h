// The run directory (train.out_dir), written by the lead rank only:
//   config.json    the resolved config
//   meta.json      the dataset's vocabulary, so that `parallm sample` needs
//                  nothing but the run directory
//   metrics.jsonl  one JSON object per train step and per evaluation
//   memory.json    peak bytes per category, after the first step
//   train.log      the log lines with timestamps, and the error that ended
//                  the run if one did
//   ckpt/          the checkpoint (train/checkpoint.h)
// It is opened only once every check of the run has passed, so bad input
// changes nothing in an existing directory. A scratch run refuses a directory
// that holds a checkpoint unless train.overwrite=true. A resumed run keeps the
// metrics of the steps before the one it resumes at and drops the later ones
// (written after the checkpoint it continues from), so metrics.jsonl reads as
// one run.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "train/config.h"
#include "train/metrics.h"

namespace parallm::train {

// ConfigError if a scratch run would replace the checkpoint in cfg.out_dir
// (unless train.overwrite=true), naming what the user can do instead.
void check_scratch_run_dir(const RunConfig& cfg);

class RunDir {
 public:
  // `resume_iter`: the iteration a resumed run continues at (< 0: a scratch
  // run, whose metrics and log start empty; an eval-only run passes the
  // checkpoint's iteration and keeps everything).
  RunDir(const RunConfig& cfg, int64_t resume_iter, bool keep_all_metrics);
  ~RunDir();  // detaches train.log
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  void write_metrics(const nlohmann::json& record) { metrics_->write(record); }
  void write_memory(const nlohmann::json& record) const;
  // Records the error that ends the run in train.log.
  static void log_error(const std::string& what);

 private:
  std::string dir_;
  std::unique_ptr<MetricsWriter> metrics_;
};

}  // namespace parallm::train
