#include "train/config/config.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/gpu.h"
#include "core/host.h"
#include "core/text.h"
#include "kernels/bf16.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_stages.h"
#include "train/config/config_keys.h"
#include "train/config/plan.h"

namespace parallm::train {

using config_table::check_switch;
using config_table::keys;
using config_table::kMaxTokensPerBatch;

void RunConfig::set(const std::string& key, const std::string& value) {
  auto it = keys().find(key);
  if (it == keys().end()) {
    // Suggest the closest known key by shared suffix (e.g. "n_layer" -> "model.n_layer").
    std::string hint;
    for (const auto& [k, _] : keys())
      if (k.size() > key.size() && k.compare(k.size() - key.size(), key.size(), key) == 0 &&
          k[k.size() - key.size() - 1] == '.')
        hint = fmt::format(" (did you mean {}?)", k);
    throw ConfigError("config", fmt::format("unknown key \"{}\"{}; `parallm train --help-keys` lists them", key, hint));
  }
  it->second.set(*this, key, value);
  explicit_keys_.insert(key);
}

void RunConfig::apply_overrides(const std::vector<std::string>& kv) {
  for (const auto& s : kv) {
    auto eq = s.find('=');
    PARALLM_CHECK(eq != std::string::npos && eq > 0, ConfigError, "config",
                  "override \"{}\" is not of the form key=value", s);
    set(s.substr(0, eq), s.substr(eq + 1));
  }
}

namespace {
// Sets every scalar of a YAML tree by its dotted path; a key given twice (in
// any spelling, nested or dotted) or left without a value is an error.
void flatten(const YAML::Node& n, const std::string& prefix, RunConfig& c, std::set<std::string>& seen) {
  if (n.IsMap()) {
    for (const auto& kv : n)
      flatten(kv.second, prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>(), c,
              seen);
  } else if (n.IsScalar()) {
    PARALLM_CHECK(seen.insert(prefix).second, ConfigError, "config", "{} is given twice", prefix);
    c.set(prefix, n.as<std::string>());
  } else if (n.IsNull()) {
    throw ConfigError("config", fmt::format("{} has no value", prefix));
  } else {
    throw ConfigError("config", fmt::format("{} must be a single value, not a list", prefix));
  }
}
}  // namespace

namespace {
// The one YAML document of a config file. Its type is checked without
// opening it (a FIFO would block the open); a second document (after ---)
// is an error, not silently ignored.
YAML::Node load_one_document(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    PARALLM_CHECK(errno != ENOENT, IoError, "config", "config file {} does not exist", path);
  else
    PARALLM_CHECK(S_ISREG(st.st_mode), ConfigError, "config",
                  "config file {} is {}, not a YAML file; pass the path of a regular file", path,
                  file_kind(st.st_mode));
  const std::string text = read_text_file(path, "config");  // a FIFO put there meanwhile is refused too
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("config", fmt::format("{}: {}", path, e.what()));
  }
  PARALLM_CHECK(docs.size() <= 1, ConfigError, "config",
                "{} holds {} YAML documents (separated by ---); a config file is one document: merge them into one "
                "mapping or remove the ---",
                path, docs.size());
  return docs.empty() ? YAML::Node() : docs.front();
}
}  // namespace

void RunConfig::load_file(const std::string& path) {
  const YAML::Node root = load_one_document(path);
  if (root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap()) throw ConfigError("config", fmt::format("{}: top level must be a mapping", path));
  std::set<std::string> seen;
  try {
    flatten(root, "", *this, seen);
  } catch (const ConfigError& e) {
    throw ConfigError("config", fmt::format("{}: {}", path, e.message()));
  } catch (const YAML::Exception& e) {  // a key that is not a scalar (a list or a mapping as a key)
    throw ConfigError("config", fmt::format("{}: keys must be plain names ({})", path, e.what()));
  }
}

namespace {
// Every numeric key against its range: the table's, which --help-keys prints.
void check_key_ranges(const RunConfig& c) {
  for (const auto& [k, key] : keys()) {
    if (!key.range) continue;
    const nlohmann::json v = key.get(c);
    PARALLM_CHECK(key.range->contains(v.get<double>()), ConfigError, "config",
                  "{} must be in {}, got {}; `parallm train --help-keys` lists every key's range", k, key.range->text(),
                  v.dump());
  }
}

// A CPU run's least memory (train/config/plan.h's closed form, no allocation)
// against this machine's physical memory, before anything is written.
void check_fits_host(const RunConfig& c) {
  if (!c.train.device.is_cpu()) return;  // the GPU's allocations report themselves
  // Split over tp x pp x cp ranks, every parameter and activation is held by
  // at least one of them, so the largest holds at least 1/(tp x pp x cp) of the whole.
  const auto split = static_cast<uint64_t>(c.parallel.tp * c.parallel.pp * c.parallel.cp);
  const uint64_t need = min_run_bytes(c.model, c.train.batch_size, static_cast<int>(c.parallel.zero.stage)) /
                        std::max<uint64_t>(split, 1);
  const uint64_t have = physical_memory_bytes();
  PARALLM_CHECK(
      have == 0 || need <= have, ConfigError, "config",
      "model.n_layer={}, model.n_embd={}, model.vocab_size={}, model.block_size={} and "
      "model.batch_size={} (zero.stage={}, parallel.tp x parallel.pp x parallel.cp = {}) need at least {} of memory "
      "per rank for "
      "the parameters, gradients, optimizer state and activations, but this machine has {} ({} bytes); make the "
      "model or the micro-batch smaller (or split it: zero.stage, parallel.tp, parallel.pp and more ranks)",
      c.model.n_layer, c.model.n_embd, c.model.vocab_size, c.model.block_size, c.train.batch_size,
      c.parallel.zero.stage, split,
      need == UINT64_MAX ? std::string("more than 2^64 bytes") : fmt::format("{} ({} bytes)", format_bytes(need), need),
      format_bytes(have), have);
}
}  // namespace

void RunConfig::check_ranges() const {
  model.validate();
  check_thread_count(train.threads, "config", "train.threads");
  check_key_ranges(*this);
  const int64_t B = train.batch_size;
  PARALLM_CHECK(B * model.block_size <= kMaxTokensPerBatch, ConfigError, "config",
                "model.batch_size x model.block_size = {} x {} = {} tokens per micro-batch is more than {} (2^31 - 1); "
                "lower one of them (optimizer.gas accumulates micro-batches)",
                B, model.block_size, B * model.block_size, kMaxTokensPerBatch);
  parallel::check_layout(parallel, model);
  if (parallel.pp > 1)
    parallel::check_pipe_shape({static_cast<int>(parallel.pp), static_cast<int>(optimizer.gas),
                                static_cast<int>(parallel.pp_virtual), parallel.pp_schedule});
}

namespace {
void check_device(const RunConfig& c) {
  const TrainSection& t = c.train;
  PARALLM_CHECK(t.dtype != Precision::BF16 || !t.device.is_cpu() || kernels::bf16_products_supported(), ConfigError,
                "config",
                "train.dtype=bf16 on the CPU needs bf16 matrix hardware (AMX or AVX-512 BF16), which this CPU lacks "
                "(oneDNN offers \"{}\"); use train.dtype=fp32",
                kernels::bf16_products_impl());
  PARALLM_CHECK(!t.fp8_bf16_activations || !t.device.is_cpu(), ConfigError, "config",
                "train.fp8_activations=bf16 runs FP8 tensor cores with bf16 activations: it needs train.device=cuda "
                "(the CPU emulates FP8 with fp32 activations: train.fp8_activations=fp32)");
  if (t.device.is_cpu()) return;
  const std::string dev = t.device_by_rank ? "cuda" : t.device.str();
  PARALLM_CHECK(gpu::built(), ConfigError, "config",
                "train.device={}: this parallm was built without CUDA (configure with -DPARALLM_CUDA=ON)", dev);
  PARALLM_CHECK(
      c.parallel.cp == 1 || c.parallel.cp_kind != model::CpKind::Ring || c.compute_dtype() != DType::BF16, ConfigError,
      "config",
      "parallel.cp_kind=ring with bf16 activations on the GPU (train.device={}): the ring's block kernels are "
      "fp32 for now; use train.dtype=fp32, or parallel.cp_kind=ulysses",
      dev);
}
}  // namespace

void RunConfig::validate() const {
  check_ranges();
  const OptimizerSection& o = optimizer;
  if (o.decay_lr) {
    PARALLM_CHECK(o.min_lr <= o.learning_rate, ConfigError, "config",
                  "optimizer.min_lr={} is above optimizer.learning_rate={}: the decay would raise the rate", o.min_lr,
                  o.learning_rate);
    PARALLM_CHECK(o.lr_decay_iters >= o.warmup_iters, ConfigError, "config",
                  "optimizer.lr_decay_iters={} is before the end of warmup (optimizer.warmup_iters={}): the rate "
                  "would drop to min_lr right after warmup",
                  o.lr_decay_iters, o.warmup_iters);
  }
  PARALLM_CHECK(!train.out_dir.empty(), ConfigError, "config", "train.out_dir must not be empty");
  PARALLM_CHECK(train.resume_step < 0 || train.resume(), ConfigError, "config",
                "train.resume_step={} needs train.init_from=resume (it picks the checkpoint a resume starts from)",
                train.resume_step);
  train.skip_batches.check_reach("train.skip_batches", train.max_iters);
  PARALLM_CHECK(!data.dir.empty(), ConfigError, "config", "data.dir must not be empty");
  check_switch("train.kill_switch", train.kill_switch);
  check_switch("train.save_switch", train.save_switch);
  PARALLM_CHECK(!train.fp8_tensorwise || train.dtype == Precision::FP8, ConfigError, "config",
                "train.fp8_scaling=tensorwise scales FP8 products: it needs train.dtype=fp8");
  PARALLM_CHECK(!train.fp8_bf16_activations || train.dtype == Precision::FP8, ConfigError, "config",
                "train.fp8_activations=bf16 sets the activations around FP8 products: it needs train.dtype=fp8");
  PARALLM_CHECK(!train.fp8_bf16_activations || train.fp8_tensorwise, ConfigError, "config",
                "train.fp8_activations=bf16 multiplies on FP8 tensor cores, which take one scale per operand: it needs "
                "train.fp8_scaling=tensorwise");
  // An expert's products run on the ranks its tokens went to, a different number of times on each: a maximum over
  // the stage's ranks per product would wait for ranks that never compute it.
  PARALLM_CHECK(!train.fp8_tensorwise || model.moe.experts == 0, ConfigError, "config",
                "train.fp8_scaling=tensorwise with model.moe_experts={}: tensorwise scaling is for dense models for "
                "now; use train.fp8_scaling=rowwise",
                model.moe.experts);
  loss_scale_config();
  check_device(*this);
  check_fits_host(*this);
}

optim::LossScaleConfig RunConfig::loss_scale_config() const {
  using optim::LossScaleMode;
  using Kind = LossScaleSetting::Kind;
  const TrainSection& t = train;
  PARALLM_CHECK(t.loss_scale_window > 0 && t.loss_scale_window <= INT32_MAX, ConfigError, "config",
                "train.loss_scale_window must be in [1, 2^31 - 1], got {}", t.loss_scale_window);
  optim::LossScaleConfig c{LossScaleMode::Off, t.loss_scale_init, t.loss_scale_window};
  switch (t.loss_scale.kind) {
    case Kind::Auto:
    case Kind::Dynamic:
      c.mode = t.loss_scale.kind == Kind::Dynamic || t.dtype == Precision::FP16 ? LossScaleMode::Dynamic
                                                                                : LossScaleMode::Off;
      PARALLM_CHECK(optim::is_loss_scale(t.loss_scale_init), ConfigError, "config",
                    "train.loss_scale_init={}: must be a power of two in [1, 2^64], so scaling is exact",
                    t.loss_scale_init);
      return c;
    case Kind::Off:
      return c;
    case Kind::Static:
      break;
  }
  c.scale = t.loss_scale.scale;
  c.mode = c.scale == 1 ? LossScaleMode::Off : LossScaleMode::Static;
  return c;
}

parallel::MeshDims RunConfig::mesh_dims() const {
  return {static_cast<int>(parallel.dp), static_cast<int>(parallel.tp), static_cast<int>(parallel.pp),
          static_cast<int>(parallel.cp), static_cast<int>(parallel.ep)};
}

nlohmann::json RunConfig::to_json() const {
  nlohmann::json j;
  for (const auto& [k, key] : keys()) j[k] = key.get(*this);
  return j;
}

RunConfig RunConfig::from_json(const nlohmann::json& j) {
  RunConfig c;
  for (const auto& [k, v] : j.items()) c.set(k, v.is_string() ? v.get<std::string>() : v.dump());
  return c;
}

const std::set<std::string>& architecture_keys() {
  static const std::set<std::string> keys = {"model.n_layer",
                                             "model.n_head",
                                             "model.n_embd",
                                             "model.block_size",
                                             "model.bias",
                                             "model.vocab_size",
                                             "model.gelu",
                                             "model.tie_embeddings",
                                             "model.arch",
                                             "model.n_kv_head",
                                             "model.head_dim",
                                             "model.intermediate_size",
                                             "model.rope_theta",
                                             "model.rope_scaling",
                                             "model.rope_factor",
                                             "model.rope_low_freq_factor",
                                             "model.rms_norm_eps",
                                             "model.attention_bias",
                                             "model.rope_high_freq_factor",
                                             "model.rope_original_max_position_embeddings",
                                             "model.moe_experts",
                                             "model.moe_top_k",
                                             "model.moe_intermediate_size",
                                             "model.moe_shared_experts",
                                             "model.moe_score",
                                             "model.moe_norm_topk",
                                             "model.moe_routed_scale",
                                             "model.moe_first_layer",
                                             "model.moe_every",
                                             "model.moe_bias"};
  return keys;
}

RunConfig RunConfig::resumed_from(const nlohmann::json& saved, std::vector<std::string>* changed) const {
  const std::set<std::string>& architecture = architecture_keys();
  // Where and how this process runs, not what the run is: always this invocation's.
  static const std::set<std::string> this_run = {
      "train.out_dir",        "train.init_from",   "train.resume_step", "train.eval_only",
      "train.overwrite",      "train.threads",     "train.device",      "train.peak_flops",
      "train.progress",       "train.kill_switch", "train.save_switch", "train.max_duration",
      "train.detect_anomaly", "comm.backend",      "comm.timeout_s",    "parallel.dp"};  // derived from the job's ranks
  RunConfig r = from_json(saved);
  for (const auto& [k, key] : keys()) {
    const nlohmann::json mine = key.get(*this), theirs = key.get(r);
    if (!(gives(k) || this_run.count(k)) || mine == theirs) continue;
    PARALLM_CHECK(!architecture.count(k), ConfigError, "config",
                  "{}={}: the checkpoint in {} was trained with {}={}; a resumed run keeps its architecture (drop "
                  "the key, or start a new run in another train.out_dir)",
                  k, mine.dump(), train.out_dir, k, theirs.dump());
    key.set(r, k, mine.is_string() ? mine.get<std::string>() : mine.dump());
    if (changed && !this_run.count(k)) changed->push_back(fmt::format("{}={} (was {})", k, mine.dump(), theirs.dump()));
  }
  return r;
}

const std::vector<std::string>& RunConfig::layout_keys() {
  static const std::vector<std::string> k = {
      "parallel.tp", "parallel.pp",      "parallel.pp_schedule",     "parallel.pp_virtual",        "parallel.pp_layers",
      "parallel.cp", "parallel.cp_kind", "parallel.tp_across_nodes", "parallel.sequence_parallel", "parallel.ep"};
  return k;
}

bool RunConfig::gives(const std::string& k) const {
  static const RunConfig defaults;
  const auto it = keys().find(k);
  PARALLM_CHECK(it != keys().end(), InternalError, "config", "no key {}", k);
  return explicit_keys_.count(k) > 0 || it->second.get(*this) != it->second.get(defaults);
}

void RunConfig::take_default(const std::string& k) {
  static const RunConfig defaults;
  const auto it = keys().find(k);
  PARALLM_CHECK(it != keys().end(), InternalError, "config", "no key {}", k);
  const nlohmann::json v = it->second.get(defaults);
  it->second.set(*this, k, v.is_string() ? v.get<std::string>() : v.dump());
  explicit_keys_.erase(k);
}

std::vector<std::pair<std::string, std::string>> RunConfig::describe() {
  std::vector<std::pair<std::string, std::string>> out;
  RunConfig d;
  for (const auto& [k, key] : keys())
    out.push_back({k, fmt::format("{}{} (default {}): {}", key.type, key.range ? " in " + key.range->text() : "",
                                  key.get(d).dump(), key.help)});
  return out;
}

}  // namespace parallm::train
