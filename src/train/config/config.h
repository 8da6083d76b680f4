// Run configuration: every key a user can set, with its type, default and
// help, in one table. Config files (YAML, nested or dotted) and command-line
// overrides (key=value) both go through set(), so an unknown key or a bad
// value is always an error that names the key. The resolved config is written
// to the run directory as JSON and read back on resume.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/cp_layout.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "parallel/parallel_config.h"
#include "train/loop/batch_skip.h"

namespace parallm::parallel {
struct MeshDims;
}

namespace parallm::train {

// train.init_from
// (hf: the weights of a Hugging Face GPT-2 directory, hf/hf_gpt2.h)
enum class InitFrom { Scratch, Resume, Hf, Auto };  // Auto: Resume where train.out_dir holds a checkpoint
// train.dtype: the training precision (fp16 and fp8: products emulated on the CPU, computed alike on the GPU; fp8 with
// train.fp8_activations=bf16: FP8 tensor cores with bf16 activations, GPU only).
enum class Precision { FP32, BF16, FP16, FP8 };
// train.loss_scale as given: auto (dynamic for fp16, else off), dynamic, off, or a static scale.
struct LossScaleSetting {
  enum class Kind { Auto, Dynamic, Off, Static } kind = Kind::Auto;
  double scale = 1;  // Static: the power of two
};

// The sections mirror the keys (model.*, train.*, optimizer.*, data.*, comm.*,
// parallel.*, ddp.*, zero.*); every string a user gives is parsed into its
// enum or number once, by set().
// train.max_duration=auto: the scheduler's job end time.
constexpr double kDurationAuto = -1;

struct TrainSection {
  int64_t batch_size = 12;  // key model.batch_size: the micro-batch each data-parallel rank reads
  int64_t max_iters = 5000;
  int64_t eval_interval = 250;
  int64_t eval_iters = 200;
  int64_t log_interval = 10;
  uint64_t seed = 1337;
  std::string out_dir = "out";
  InitFrom init_from = InitFrom::Scratch;
  std::string hf_dir;  // train.init_from=hf:DIR
  bool always_save_checkpoint = false;
  int64_t keep_checkpoints = 2;     // step-numbered checkpoints kept (ckpt_dirs.h)
  bool async_save = false;          // periodic saves written by a background thread (checkpoint/state_io.h)
  int64_t checkpoint_interval = 0;  // iterations between step-numbered checkpoints (0 = none)
  int64_t resume_step = -1;         // resume from the checkpoint of this iteration (-1: the newest intact)
  BatchSkip skip_batches;           // global batch indices never fed (batch_skip.h)
  bool eval_only = false;
  bool overwrite = false;       // a scratch run may replace (delete) the checkpoint already in out_dir
  bool final_eval = true;       // evaluate (and checkpoint) at max_iters too
  bool tensorboard = false;     // the metrics also as TensorBoard event files (train/records/tb_writer.h)
  double peak_flops = 0;        // FLOP/s for MFU; 0 = measure the GEMM peak once per machine
  int64_t threads = 0;          // OpenMP threads; 0 = OMP_NUM_THREADS or the cores per rank
  int64_t sample_tokens = 200;  // tokens sampled at each eval (0 = none)
  std::string sample_prompt = "\n";
  float temperature = 0.8f;
  int64_t top_k = 200;
  bool progress = true;           // progress bar when stdout is a terminal
  bool detect_anomaly = false;    // the numeric detector (model/numeric_watch.h)
  int64_t check_replicas = 0;     // every N iterations, the copies that must be equal compared (0: off)
  Device device = Device::cpu();  // cpu | cuda | cuda:N
  bool device_by_rank = false;    // "cuda" without an index: the GPU of this rank (NCCL picks it by local rank)
  Precision dtype = Precision::FP32;
  LossScaleSetting loss_scale;
  bool fp8_bf16_ends = true;          // fp8: the first and last blocks' products bf16 (the head's always are)
  bool fp8_tensorwise = false;        // fp8: one scale per operand over its ranks (train.fp8_scaling=tensorwise)
  bool fp8_bf16_activations = false;  // fp8 on the GPU: bf16 activations around the FP8 products (fp8_activations)
  bool cuda_graphs = false;           // a lone GPU process: training passes replayed from CUDA graphs (pass_graphs.h)
  double loss_scale_init = 65536;     // dynamic: the first scale
  int64_t loss_scale_window = 2000;   // dynamic: finite steps in a row before the scale doubles
  // The loss-spike guard (train/controls/spike_guard.h): z-scores above which a step is skipped (0: off).
  double skip_loss_zscore = 0, skip_grad_zscore = 0;
  int64_t skip_window = 100;          // applied steps the mean and deviation are taken over
  int64_t skip_max_consecutive = 10;  // more skipped steps in a row stop the run
  // The operator's controls (train/controls/control.h).
  std::string kill_switch;       // file: when present, save and exit 0 ("" = none)
  std::string save_switch;       // file: when present, save a step checkpoint, delete it and go on
  double max_duration_s = 0;     // seconds (0 = none; kDurationAuto = the job's end time)
  double straggler_pct = 20;     // warn when a rank computes this much slower than its peers (0 = off)
  int64_t straggler_window = 5;  // log intervals per straggler verdict

  bool resume() const { return init_from == InitFrom::Resume; }
};

// AdamW's hyperparameters default to the one set optim::AdamWConfig declares.
struct OptimizerSection {
  float learning_rate = optim::AdamWConfig{}.lr;
  float min_lr = 1e-4f;
  int64_t warmup_iters = 100;
  int64_t lr_decay_iters = 5000;
  bool decay_lr = true;
  float weight_decay = optim::AdamWConfig{}.weight_decay;
  float beta1 = optim::AdamWConfig{}.beta1;
  float beta2 = optim::AdamWConfig{}.beta2;
  float eps = optim::AdamWConfig{}.eps;
  float grad_clip = 1.0f;
  int64_t gas = 1;  // gradient accumulation steps
};

struct DataSection {
  std::string dir = "data/shakespeare_char";
};

struct CommSection {
  std::string backend = "auto";  // auto | self | mpi | nccl (comm::resolve_backend reads it)
  double timeout_s = 300;        // per communication operation
};

// The parallel section: parallel/parallel_config.h (its rules between axes live there too).
using DdpSection = parallel::DdpConfig;
using ZeroSection = parallel::ZeroConfig;
using ParallelSection = parallel::ParallelConfig;

// The keys that describe the model's architecture (a resumed run or a Hugging Face directory keeps them).
const std::set<std::string>& architecture_keys();

struct RunConfig {
  model::GPTConfig model;  // vocab_size comes from the dataset unless set explicitly
  bool vocab_size_set = false;
  TrainSection train;
  OptimizerSection optimizer;
  DataSection data;
  CommSection comm;
  ParallelSection parallel;

  // The dtype the model computes in (train.dtype).
  DType compute_dtype() const {
    return train.dtype == Precision::BF16 || (train.dtype == Precision::FP8 && train.fp8_bf16_activations) ? DType::BF16
                                                                                                           : DType::F32;
  }
  // The mesh's degrees as configured (dp 0: derived from the world).
  parallel::MeshDims mesh_dims() const;

  // Sets one key from its string form; throws ConfigError naming the key.
  void set(const std::string& key, const std::string& value);
  // Applies "key=value" overrides in order.
  void apply_overrides(const std::vector<std::string>& kv);
  // Loads a YAML (or JSON) file: nested maps or dotted keys, scalars only.
  void load_file(const std::string& path);
  // Every numeric key in its range (the table --help-keys prints; model
  // sizes by model/config.h's bounds, train.threads by this machine's cores)
  // the micro-batch's token count, and the parallel.*, ddp.* and zero.* keys
  // together (a parallelism not built yet is refused in words): checks that
  // need no other resource.
  void check_ranges() const;
  // check_ranges(), the cross-key checks, and that the run's least memory
  // (train/config/plan.h: min_run_bytes) fits this machine (after everything is set).
  void validate() const;
  // train.loss_scale with its init and window (ConfigError naming the key).
  optim::LossScaleConfig loss_scale_config() const;
  nlohmann::json to_json() const;
  static RunConfig from_json(const nlohmann::json& j);
  // What a resumed run continues with: the checkpoint's config (`saved`) with
  // the keys this config was given laid over it (set through set(), or
  // differing from the defaults). The keys of where and how this process runs
  // (train.out_dir, init_from, eval_only, overwrite, threads, device,
  // peak_flops, progress, comm.*, and parallel.dp, derived from the job's
  // ranks) are always this config's; the layout keys (layout_keys()) are the
  // checkpoint's unless given, as every other key. A key of the
  // architecture that differs is a ConfigError naming it; every other key
  // that differs is listed in *changed ("key=new (was old)"), since the run
  // then leaves the saved trajectory.
  RunConfig resumed_from(const nlohmann::json& saved, std::vector<std::string>* changed) const;
  // Keys with type, valid range (numeric keys; validate() checks the same), default and help, for
  // `parallm train --help-keys`.
  static std::vector<std::pair<std::string, std::string>> describe();
  // Whether `key` was given (set(): a config file, key=value).
  bool given(const std::string& key) const { return explicit_keys_.count(key) > 0; }
  // Whether this config gives `key`: given, or set to other than its default.
  bool gives(const std::string& key) const;
  // Sets `key` back to its default (no longer given).
  void take_default(const std::string& key);
  // The keys of the parallel layout but parallel.dp (derived from the job's
  // ranks): a resumed run takes the checkpoint's unless it gives them.
  static const std::vector<std::string>& layout_keys();

 private:
  std::set<std::string> explicit_keys_;  // keys given through set() (config file, key=value)
};

}  // namespace parallm::train
