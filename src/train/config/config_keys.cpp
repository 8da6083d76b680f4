// The key table of config_keys.h, section by section (model, train, optimizer,
// data and comm, controls, parallel, spike guard), with the parsers of values.
#include "train/config/config_keys.h"

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
#include "parallel/pipeline_stages.h"
#include "train/config/plan.h"

namespace parallm::train::config_table {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

int64_t parse_int(const std::string& key, const std::string& v) {
  std::string s = v;
  // Allow 5_000 and 1e3-style integers users write in configs.
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (const auto i = to_int(s)) return *i;
  const auto d = to_decimal(s);
  if (d && std::abs(*d) < 9.2e18 && *d == static_cast<double>(static_cast<int64_t>(*d)))
    return static_cast<int64_t>(*d);
  throw ConfigError("config", fmt::format("{}: expected an integer, got \"{}\"", key, v));
}

double parse_float(const std::string& key, const std::string& v) {
  if (const auto d = to_decimal(v)) return *d;
  throw ConfigError("config", fmt::format("{}: expected a finite decimal number, got \"{}\"", key, v));
}

// A float field as JSON: its shortest decimal form (0.001, not the double
// nearest the float, 0.0010000000474974513), which reads back to the same float.
nlohmann::json number_json(float f) {
  return nlohmann::json(std::stod(fmt::format("{}", f)));
}
nlohmann::json number_json(double d) {
  return nlohmann::json(d);
}

bool parse_bool(const std::string& key, const std::string& v) {
  std::string l = lower(v);
  if (l == "true" || l == "1" || l == "yes" || l == "on") return true;
  if (l == "false" || l == "0" || l == "no" || l == "off") return false;
  throw ConfigError("config", fmt::format("{}: expected true or false, got \"{}\"", key, v));
}

// A setting of two named values held as a bool: `on` (any case) true, `off` false.
bool parse_either(const std::string& key, const std::string& v, const char* off, const char* on) {
  const std::string l = lower(v);
  PARALLM_CHECK(l == off || l == on, ConfigError, "config", "{}: expected {} or {}, got \"{}\"", key, off, on, v);
  return l == on;
}

const char* precision_name(Precision p) {
  return p == Precision::FP32 ? "fp32" : p == Precision::BF16 ? "bf16" : p == Precision::FP16 ? "fp16" : "fp8";
}

// train.loss_scale's value: "auto" (dynamic for fp16, off otherwise),
// "dynamic", "off" (or "none") or a static power of two.
LossScaleSetting parse_loss_scale(const std::string& value) {
  using Kind = LossScaleSetting::Kind;
  if (value == "auto") return {Kind::Auto};
  if (value == "dynamic") return {Kind::Dynamic};
  if (value == "off" || value == "none") return {Kind::Off};
  const auto scale = to_decimal(value);
  PARALLM_CHECK(scale, ConfigError, "config",
                "train.loss_scale: expected auto, dynamic, off or a power of two (a static scale), got \"{}\"", value);
  PARALLM_CHECK(optim::is_loss_scale(*scale), ConfigError, "config",
                "train.loss_scale={}: a static scale must be a power of two in [1, 2^64], so scaling is exact", value);
  return {Kind::Static, *scale};
}

std::string loss_scale_text(const LossScaleSetting& l) {
  using Kind = LossScaleSetting::Kind;
  switch (l.kind) {
    case Kind::Auto:
      return "auto";
    case Kind::Dynamic:
      return "dynamic";
    case Kind::Off:
      return "off";
    case Kind::Static:
      break;
  }
  return fmt::format("{}", l.scale);
}

Range closed(double lo, double hi) {
  return {lo, hi};
}
Range above(double lo, double hi) {  // (lo, hi]
  return {lo, hi, true, false};
}
Range below(double lo, double hi) {  // [lo, hi)
  return {lo, hi, false, true};
}

// Upper bounds of the counts that have no natural one: far above any real
// run, low enough that products of them stay exact.
// Iteration counts and intervals: a checkpoint's iteration (up to
// train.max_iters + 1) is kept and sent between ranks as an int32.
constexpr double kMaxIters = INT32_MAX - 1;
constexpr double kMaxBatch = 1 << 20;     // model.batch_size, optimizer.gas
constexpr double kMaxEvalIters = 1e6;     // train.eval_iters
constexpr double kMaxSampleTokens = 1e5;  // train.sample_tokens
constexpr double kMaxRanks = 1 << 24;     // parallel.* degrees

#define INT_KEY(name, field, lo, hi, help)                                                                      \
  {                                                                                                             \
    name, {                                                                                                     \
      "int", help, [](RunConfig& c, const std::string& k, const std::string& v) { c.field = parse_int(k, v); }, \
          [](const RunConfig& c) { return nlohmann::json(c.field); }, closed(lo, hi)                            \
    }                                                                                                           \
  }
#define FLOAT_KEY(name, field, range, help)                              \
  {                                                                      \
    name, {                                                              \
      "float", help,                                                     \
          [](RunConfig& c, const std::string& k, const std::string& v) { \
            c.field = static_cast<decltype(c.field)>(parse_float(k, v)); \
          },                                                             \
          [](const RunConfig& c) { return number_json(c.field); }, range \
    }                                                                    \
  }
#define BOOL_KEY(name, field, help)                                                                               \
  {                                                                                                               \
    name, {                                                                                                       \
      "bool", help, [](RunConfig& c, const std::string& k, const std::string& v) { c.field = parse_bool(k, v); }, \
          [](const RunConfig& c) { return nlohmann::json(c.field); }, std::nullopt                                \
    }                                                                                                             \
  }
#define EITHER_KEY(name, field, off, on, help)                                                                     \
  {                                                                                                                \
    name, {                                                                                                        \
      "string", help,                                                                                              \
          [](RunConfig& c, const std::string& k, const std::string& v) { c.field = parse_either(k, v, off, on); }, \
          [](const RunConfig& c) { return nlohmann::json(c.field ? on : off); }, std::nullopt                      \
    }                                                                                                              \
  }
#define STR_KEY(name, field, help)                                                                 \
  {                                                                                                \
    name, {                                                                                        \
      "string", help, [](RunConfig& c, const std::string&, const std::string& v) { c.field = v; }, \
          [](const RunConfig& c) { return nlohmann::json(c.field); }, std::nullopt                 \
    }                                                                                              \
  }

// model.* (and model.batch_size, the micro-batch)
void add_model_keys(KeyTable& t) {
  t.insert(
      {INT_KEY("model.n_layer", model.n_layer, 1, model::kMaxLayers, "transformer blocks"),
       INT_KEY("model.n_head", model.n_head, 1, model::kMaxHeads, "attention heads"),
       INT_KEY("model.n_embd", model.n_embd, 1, model::kMaxEmbd, "embedding width"),
       INT_KEY("model.block_size", model.block_size, 1, model::kMaxBlockSize, "context length (tokens per sample)"),
       INT_KEY("model.batch_size", train.batch_size, 1, kMaxBatch, "micro batch per rank"),
       FLOAT_KEY("model.dropout", model.dropout, below(0, 1), "dropout probability"),
       BOOL_KEY("model.bias", model.bias, "biases in Linear and LayerNorm"),
       BOOL_KEY("model.tie_embeddings", model.tie_embeddings,
                "the LM head shares the token table (GPT-2); false: a head matrix of its own (lm_head.weight)"),
       {"model.vocab_size",
        {"int", "vocabulary size (default: from the dataset's meta.json)",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           c.model.vocab_size = parse_int(k, v);
           c.vocab_size_set = true;
         },
         [](const RunConfig& c) { return nlohmann::json(c.model.vocab_size); }, closed(1, model::kMaxVocab)}},
       {"model.gelu",
        {"string", "exact | tanh",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           std::string l = lower(v);
           if (l == "exact" || l == "erf")
             c.model.gelu = kernels::GeluKind::Exact;
           else if (l == "tanh")
             c.model.gelu = kernels::GeluKind::Tanh;
           else
             throw ConfigError("config", fmt::format("{}: expected exact or tanh, got \"{}\"", k, v));
         },
         [](const RunConfig& c) { return nlohmann::json(c.model.gelu == kernels::GeluKind::Exact ? "exact" : "tanh"); },
         std::nullopt}},
       {"model.arch",
        {"string",
         "gpt2 (LayerNorm, learned positions, GELU MLP) | llama (RMSNorm, rotary positions, grouped-query attention, "
         "SwiGLU MLP) | qwen3 (llama with per-head QK-norm)",
         [](RunConfig& c, const std::string& k, const std::string& v) { c.model.arch = model::parse_arch(v, k); },
         [](const RunConfig& c) { return nlohmann::json(model::arch_name(c.model.arch)); }, std::nullopt}},
       INT_KEY("model.n_kv_head", model.n_kv_head, 0, model::kMaxHeads,
               "llama/qwen3: key-value heads of grouped-query attention, a divisor of n_head (0: n_head)"),
       INT_KEY("model.head_dim", model.head_dim, 0, model::kMaxEmbd,
               "llama/qwen3: head size, even (0: n_embd / n_head)"),
       INT_KEY("model.intermediate_size", model.intermediate_size, 0, 16 * model::kMaxEmbd,
               "llama/qwen3: SwiGLU's hidden width (0: 4 n_embd)"),
       FLOAT_KEY("model.rope_theta", model.rope_theta, above(1, 1e12), "llama/qwen3: rotary embeddings' base"),
       {"model.rope_scaling",
        {"string", "llama/qwen3: rotary frequency scaling: none | llama3 (with model.rope_factor and the rest)",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           c.model.rope_scaling.kind = model::parse_rope_scaling(v, k);
         },
         [](const RunConfig& c) { return nlohmann::json(model::rope_scaling_name(c.model.rope_scaling.kind)); },
         std::nullopt}},
       FLOAT_KEY("model.rope_factor", model.rope_scaling.factor, closed(1, 1e6), "llama3 rope scaling: factor"),
       FLOAT_KEY("model.rope_low_freq_factor", model.rope_scaling.low_freq_factor, above(0, 1e6),
                 "llama3 rope scaling: low_freq_factor"),
       FLOAT_KEY("model.rope_high_freq_factor", model.rope_scaling.high_freq_factor, above(0, 1e6),
                 "llama3 rope scaling: high_freq_factor"),
       INT_KEY("model.rope_original_max_position_embeddings", model.rope_scaling.original, 1, model::kMaxBlockSize,
               "llama3 rope scaling: the context the model was pretrained with"),
       FLOAT_KEY("model.rms_norm_eps", model.rms_norm_eps, above(0, 1), "llama/qwen3: RMSNorm's epsilon"),
       BOOL_KEY("model.attention_bias", model.attention_bias, "llama/qwen3: biases on q, k and v (Qwen2-style)"),
       {"model.recompute",
        {"string",
         "activation recomputation: none | selective (LayerNorm and GELU outputs redone in backward) | full (each "
         "block redone from its input); the same results, less activation memory",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           const std::string l = lower(v);
           if (l == "none")
             c.model.recompute = model::Recompute::None;
           else if (l == "selective")
             c.model.recompute = model::Recompute::Selective;
           else if (l == "full")
             c.model.recompute = model::Recompute::Full;
           else
             throw ConfigError("config", fmt::format("{}: expected none, selective or full, got \"{}\"", k, v));
         },
         [](const RunConfig& c) { return nlohmann::json(model::recompute_name(c.model.recompute)); }, std::nullopt}}});
}

// model.moe_* (mixtures of experts, docs/moe.md)
void add_moe_keys(KeyTable& t) {
  t.insert({INT_KEY("model.moe_experts", model.moe.experts, 0, model::kMaxExperts,
                    "llama/qwen3: routed experts in the MoE layers (0: dense MLPs, no MoE)"),
            INT_KEY("model.moe_top_k", model.moe.top_k, 1, model::kMaxExperts, "MoE: experts each token is routed to"),
            INT_KEY("model.moe_intermediate_size", model.moe.intermediate, 0, 16 * model::kMaxEmbd,
                    "MoE: each expert's SwiGLU hidden width (0: model.intermediate_size)"),
            INT_KEY("model.moe_shared_experts", model.moe.shared, 0, model::kMaxExperts,
                    "MoE: shared experts every token uses (DeepSeek's; one SwiGLU MLP of this many experts' width)"),
            {"model.moe_score",
             {"string", "MoE: the router's scores: softmax (Mixtral, Qwen3-MoE) | sigmoid (DeepSeek-V3)",
              [](RunConfig& c, const std::string& k, const std::string& v) {
                const std::string l = lower(v);
                if (l == "softmax")
                  c.model.moe.score = kernels::MoeScore::Softmax;
                else if (l == "sigmoid")
                  c.model.moe.score = kernels::MoeScore::Sigmoid;
                else
                  throw ConfigError("config", fmt::format("{}: expected softmax or sigmoid, got \"{}\"", k, v));
              },
              [](const RunConfig& c) {
                return nlohmann::json(c.model.moe.score == kernels::MoeScore::Softmax ? "softmax" : "sigmoid");
              },
              std::nullopt}},
            BOOL_KEY("model.moe_norm_topk", model.moe.norm_topk, "MoE: normalize the chosen experts' weights to sum 1"),
            FLOAT_KEY("model.moe_routed_scale", model.moe.routed_scale, above(0, 1e6),
                      "MoE: factor on the routed experts' weights (DeepSeek's routed_scaling_factor)"),
            FLOAT_KEY("model.moe_aux_coef", model.moe.aux_coef, closed(0, 1e6),
                      "MoE: coefficient of the load-balancing loss, computed over the global micro-batch (0: off)"),
            FLOAT_KEY("model.moe_z_coef", model.moe.z_coef, closed(0, 1e6),
                      "MoE: coefficient of the router z-loss (0: off)"),
            INT_KEY("model.moe_first_layer", model.moe.first, 0, model::kMaxLayers,
                    "MoE: the first MoE layer (the ones before are dense; DeepSeek's first_k_dense_replace)"),
            INT_KEY("model.moe_every", model.moe.every, 1, model::kMaxLayers,
                    "MoE: every k-th layer from model.moe_first_layer is MoE (Qwen's decoder_sparse_step)"),
            BOOL_KEY("model.moe_bias", model.moe.bias,
                     "MoE: a score-correction bias per expert used for selection only (DeepSeek-V3's "
                     "e_score_correction_bias; not trained by gradients)"),
            FLOAT_KEY("model.moe_capacity_factor", model.moe.capacity, closed(0, 1000),
                      "MoE: each expert takes at most ceil(factor x T x top_k / experts) choices of a sequence in a "
                      "training pass, in position order, the rest dropped (0: dropless)"),
            FLOAT_KEY("model.moe_bias_update_rate", model.moe.bias_rate, closed(0, 1),
                      "MoE: DeepSeek-V3's auxiliary-loss-free balancing: after each step every expert's selection "
                      "bias moves by this rate toward balance (needs model.moe_bias=true; 0: the bias stays)")});
}

// train.*
void add_train_keys(KeyTable& t) {
  t.insert({INT_KEY("train.max_iters", train.max_iters, 0, kMaxIters, "last iteration"),
            INT_KEY("train.eval_interval", train.eval_interval, 1, kMaxIters, "iterations between evaluations"),
            INT_KEY("train.eval_iters", train.eval_iters, 1, kMaxEvalIters, "batches per evaluation"),
            INT_KEY("train.log_interval", train.log_interval, 1, kMaxIters, "iterations between log lines"),
            FLOAT_KEY("train.straggler_pct", train.straggler_pct, closed(0, 1e6),
                      "warn naming a rank whose compute per step is this many percent above its peers' median over "
                      "train.straggler_window log intervals (0 = off; several ranks only)"),
            INT_KEY("train.straggler_window", train.straggler_window, 1, kMaxIters,
                    "log intervals over which train.straggler_pct compares the ranks"),
            {"train.seed",
             {"int", "seed of init, data order and dropout (>= 0)",
              [](RunConfig& c, const std::string& k, const std::string& v) {
                const int64_t x = parse_int(k, v);
                PARALLM_CHECK(x >= 0, ConfigError, "config", "{}: must be >= 0, got {}", k, x);
                c.train.seed = static_cast<uint64_t>(x);
              },
              [](const RunConfig& c) { return nlohmann::json(c.train.seed); }, closed(0, 0x1p63 - 1)}},
            STR_KEY("train.out_dir", train.out_dir, "run directory"),
            {"train.init_from",
             {"string",
              "scratch | resume | auto (resume where train.out_dir holds a checkpoint, else scratch: what "
              "`parallm launch --restarts` reruns with) | hf:DIR (the weights of a Hugging Face GPT-2 directory: "
              "config.json + model.safetensors, to fine-tune)",
              [](RunConfig& c, const std::string& k, const std::string& v) {
                const bool hf = v.rfind("hf:", 0) == 0;
                PARALLM_CHECK(v == "scratch" || v == "resume" || v == "auto" || (hf && v.size() > 3), ConfigError,
                              "config", "{}: expected scratch, resume, auto or hf:DIR, got \"{}\"", k, v);
                c.train.init_from = hf              ? InitFrom::Hf
                                    : v == "resume" ? InitFrom::Resume
                                    : v == "auto"   ? InitFrom::Auto
                                                    : InitFrom::Scratch;
                c.train.hf_dir = hf ? v.substr(3) : "";
              },
              [](const RunConfig& c) {
                return nlohmann::json(c.train.init_from == InitFrom::Hf     ? "hf:" + c.train.hf_dir
                                      : c.train.resume()                    ? "resume"
                                      : c.train.init_from == InitFrom::Auto ? "auto"
                                                                            : "scratch");
              },
              std::nullopt}},
            BOOL_KEY("train.tensorboard", train.tensorboard,
                     "also write the metrics records as TensorBoard event files (events.out.tfevents.*) in "
                     "train.out_dir, on rank 0"),
            BOOL_KEY("train.always_save_checkpoint", train.always_save_checkpoint,
                     "save at every eval, not only on improvement"),
            BOOL_KEY("train.async_save", train.async_save,
                     "periodic and best-val checkpoints copied to host memory at the step boundary, then written, "
                     "checksummed and swapped in by a background thread while training goes on (one at a time); "
                     "stops, preemption and the final save stay synchronous"),
            INT_KEY("train.keep_checkpoints", train.keep_checkpoints, 1, kMaxIters,
                    "step-numbered checkpoints (ckpt-NNNNNNNN/) kept, newest first; the best ckpt/ is kept besides. "
                    "Default 2: the newest, and one to fall back on should it be damaged, for twice one checkpoint's "
                    "disk"),
            INT_KEY("train.checkpoint_interval", train.checkpoint_interval, 0, kMaxIters,
                    "iterations between step-numbered checkpoints (0 = none: only the best ckpt/ is saved)"),
            INT_KEY("train.resume_step", train.resume_step, -1, kMaxIters,
                    "with train.init_from=resume: resume from the checkpoint saved before this iteration (a rollback; "
                    "later checkpoints are moved to rolled_back/) instead of the newest intact one (-1)"),
            {"train.skip_batches",
             {"string",
              "global batch indices never fed, as inclusive ascending ranges a:b,c:d (the straight run's iteration "
              "numbers); the other batches keep their order; kept by the checkpoint",
              [](RunConfig& c, const std::string& k, const std::string& v) {
                c.train.skip_batches = BatchSkip::parse(k, v);
              },
              [](const RunConfig& c) { return nlohmann::json(c.train.skip_batches.text()); }, std::nullopt}}});
}

// What a run does besides its loop: evaluation, precision, threads, loss scaling.
void add_train_run_keys(KeyTable& t) {
  t.insert(
      {BOOL_KEY("train.eval_only", train.eval_only, "evaluate once and exit"),
       BOOL_KEY("train.final_eval", train.final_eval,
                "also evaluate (and checkpoint) at the last iteration when it is not a multiple of eval_interval"),
       BOOL_KEY("train.overwrite", train.overwrite,
                "start a scratch run in a train.out_dir that already holds a checkpoint (deleting it)"),
       FLOAT_KEY("train.peak_flops", train.peak_flops, closed(0, 1e21), "peak FLOP/s for MFU (0 = measured GEMM peak)"),
       {"train.threads",
        {"int", "CPU threads (0 = OMP_NUM_THREADS or the cores per rank; at most 4 per core this process may use)",
         [](RunConfig& c, const std::string& k, const std::string& v) { c.train.threads = parse_int(k, v); },
         [](const RunConfig& c) { return nlohmann::json(c.train.threads); }, Range{0, 0, false, false, max_threads}}},
       INT_KEY("train.sample_tokens", train.sample_tokens, 0, kMaxSampleTokens,
               "tokens sampled at each eval (0 = none)"),
       STR_KEY("train.sample_prompt", train.sample_prompt,
               "prompt of the eval samples (default a newline; an empty one is a newline too, as in parallm sample)"),
       FLOAT_KEY("train.temperature", train.temperature, closed(0, 100),
                 "sampling temperature (0: the most likely token)"),
       INT_KEY("train.top_k", train.top_k, 0, model::kMaxVocab, "sampling top-k (0 = all)"),
       BOOL_KEY("train.progress", train.progress, "progress bar on a terminal"),
       {"train.device",
        {"string", "cpu | cuda | cuda:N (one process on the GPU for now)",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           try {
             c.train.device = parse_device(lower(v));
           } catch (const ConfigError& e) {
             throw ConfigError("config", fmt::format("{}: {}", k, e.message()));
           }
           c.train.device_by_rank = lower(v) == "cuda";
         },
         [](const RunConfig& c) { return nlohmann::json(c.train.device_by_rank ? "cuda" : c.train.device.str()); },
         std::nullopt}},
       {"train.dtype",
        {"string",
         "fp32 | bf16 (mixed precision: bf16 products, fp32 master weights, gradients and optimizer state; on the GPU "
         "activations in bf16 too, on the CPU in fp32 with AMX products) | fp16 (the CPU's, emulated products, "
         "dynamic loss scaling) | fp8 (the CPU's, emulated row-scaled E4M3/E5M2 products; see train.fp8_bf16_ends)",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           const std::string l = lower(v);
           if (l == "fp32" || l == "float32" || l == "float")
             c.train.dtype = Precision::FP32;
           else if (l == "bf16" || l == "bfloat16")
             c.train.dtype = Precision::BF16;
           else if (l == "fp16" || l == "float16" || l == "half")
             c.train.dtype = Precision::FP16;
           else if (l == "fp8" || l == "float8")
             c.train.dtype = Precision::FP8;
           else
             throw ConfigError("config", fmt::format("{}: unknown dtype \"{}\" (fp32, bf16, fp16 or fp8)", k, v));
         },
         [](const RunConfig& c) { return nlohmann::json(precision_name(c.train.dtype)); }, std::nullopt}},
       {"train.loss_scale",
        {"string",
         "auto (dynamic for fp16, off otherwise) | dynamic (skip a step whose gradients overflow and halve the scale; "
         "double it after loss_scale_window finite steps) | off | a static power of two",
         [](RunConfig& c, const std::string&, const std::string& v) {
           c.train.loss_scale = parse_loss_scale(lower(v));
         },
         [](const RunConfig& c) { return nlohmann::json(loss_scale_text(c.train.loss_scale)); }, std::nullopt}},
       BOOL_KEY("train.cuda_graphs", train.cuda_graphs,
                "one process on a GPU: each micro-batch's forward and backward captured once as CUDA graphs and "
                "replayed (fp32 or bf16, dropout 0, dense models; the run's log says when a run cannot use them)"),
       BOOL_KEY("train.fp8_bf16_ends", train.fp8_bf16_ends,
                "train.dtype=fp8: the first and last transformer blocks keep bf16 products (the head always does)"),
       EITHER_KEY("train.fp8_scaling", train.fp8_tensorwise, "rowwise", "tensorwise",
                  "train.dtype=fp8: rowwise (each operand row's own power-of-two scale) | tensorwise (one scale per "
                  "operand from its maximum over every rank of the pipeline stage, in the training passes; dense "
                  "models)"),
       EITHER_KEY("train.fp8_activations", train.fp8_bf16_activations, "fp32", "bf16",
                  "train.dtype=fp8 on the GPU: fp32 (the activations fp32, the products computed as the CPU's "
                  "emulation) | bf16 (bf16 activations around FP8 tensor-core products, the speed FP8 is for; needs "
                  "train.fp8_scaling=tensorwise; evaluation and sampling run bf16 products)"),
       FLOAT_KEY("train.loss_scale_init", train.loss_scale_init, closed(1, 0x1p64),
                 "dynamic loss scaling: the first scale (a power of two)"),
       INT_KEY("train.loss_scale_window", train.loss_scale_window, 1, INT32_MAX,
               "dynamic loss scaling: finite steps in a row before the scale doubles")});
}

// train.*: the run's own checks (docs/operations.md).
void add_train_check_keys(KeyTable& t) {
  t.insert({BOOL_KEY("train.detect_anomaly", train.detect_anomaly,
                     "numeric detector: check each layer's weights, outputs and gradients for inf/NaN after its "
                     "forward and backward; stop at the first, printing the last 21 frames (docs/operations.md)"),
            INT_KEY("train.check_replicas", train.check_replicas, 0, kMaxIters,
                    "every N iterations, compare bitwise the copies of each weight that ranks must hold alike "
                    "(replicas, tp-replicated norms and biases, the pipeline's tied table); stop at a difference "
                    "(0 = off)")});
}

// optimizer.*
void add_optimizer_keys(KeyTable& t) {
  t.insert(
      {FLOAT_KEY("optimizer.learning_rate", optimizer.learning_rate, closed(0, 100), "peak learning rate"),
       FLOAT_KEY("optimizer.min_lr", optimizer.min_lr, closed(0, 100), "final learning rate of the cosine decay"),
       INT_KEY("optimizer.warmup_iters", optimizer.warmup_iters, 0, kMaxIters, "linear warmup iterations"),
       INT_KEY("optimizer.lr_decay_iters", optimizer.lr_decay_iters, 0, kMaxIters,
               "iteration where the decay reaches min_lr"),
       BOOL_KEY("optimizer.decay_lr", optimizer.decay_lr, "use warmup + cosine decay (else constant)"),
       FLOAT_KEY("optimizer.weight_decay", optimizer.weight_decay, closed(0, 100),
                 "AdamW weight decay (2-D weights only)"),
       FLOAT_KEY("optimizer.beta1", optimizer.beta1, below(0, 1), "AdamW beta1"),
       FLOAT_KEY("optimizer.beta2", optimizer.beta2, below(0, 1), "AdamW beta2"),
       FLOAT_KEY("optimizer.eps", optimizer.eps, above(0, 1), "AdamW epsilon"),
       FLOAT_KEY("optimizer.grad_clip", optimizer.grad_clip, closed(0, 1e9), "global gradient-norm clip (0 = off)"),
       INT_KEY("optimizer.gas", optimizer.gas, 1, kMaxBatch, "gradient accumulation steps")});
}

// data.* and comm.*
void add_run_keys(KeyTable& t) {
  t.insert({STR_KEY("data.dir", data.dir, "prepared dataset directory (train.bin, val.bin, meta.json)"),
            {"comm.backend",
             {"string",
              "auto | self | mpi | nccl (auto: when a launcher started several ranks, nccl on GPUs, mpi on the CPU)",
              [](RunConfig& c, const std::string& k, const std::string& v) {
                PARALLM_CHECK(v == "auto" || v == "self" || v == "mpi" || v == "nccl", ConfigError, "config",
                              "{}: expected auto, self, mpi or nccl, got \"{}\"", k, v);
                c.comm.backend = v;
              },
              [](const RunConfig& c) { return nlohmann::json(c.comm.backend); }, std::nullopt}},
            FLOAT_KEY("comm.timeout_s", comm.timeout_s, above(0, 604800),
                      "seconds before a communication operation is an error")});
}

// The operator's controls of a long run (train/controls/control.h).
void add_control_keys(KeyTable& t) {
  t.insert({STR_KEY("train.kill_switch", train.kill_switch,
                    "a file path: when it exists, every rank finishes its step, saves and exits 0; a run started "
                    "with it present exits 0 at once without touching the checkpoint (\"\" = none)"),
            STR_KEY("train.save_switch", train.save_switch,
                    "a file path: when it appears, the run saves a step-numbered checkpoint, deletes the file and "
                    "trains on (\"\" = none)"),
            {"train.max_duration",
             {"string",
              "the run's time limit, e.g. 5h50m, 90m, 6s (0 = none); auto: the Slurm or PBS job's end time. Before "
              "each step, if elapsed + 2 x (longest iteration + last save) would pass it, every rank saves and "
              "exits 0",
              [](RunConfig& c, const std::string& k, const std::string& v) {
                if (v == "auto") {
                  c.train.max_duration_s = kDurationAuto;
                  return;
                }
                const auto d = to_duration_s(v);
                PARALLM_CHECK(d && std::isfinite(*d), ConfigError, "config",
                              "{}: expected a duration such as 5h50m, 90m or 6s (units d, h, m, s, largest first), "
                              "a number of seconds, 0 (none) or auto; got \"{}\"{}",
                              k, v, !v.empty() && v[0] == '-' ? " (a duration cannot be negative)" : "");
                c.train.max_duration_s = *d;
              },
              [](const RunConfig& c) {
                const double d = c.train.max_duration_s;
                return nlohmann::json(d == kDurationAuto ? "auto" : d == 0 ? "0" : format_duration(d));
              },
              std::nullopt}}});
}

// parallel.*, ddp.* and zero.*
void add_parallel_keys(KeyTable& t) {
  t.insert(
      {FLOAT_KEY("ddp.bucket_mb", parallel.ddp.bucket_mb, above(0, 65536),
                 "gradient bucket size (MiB) for the overlapped all-reduce"),
       BOOL_KEY("ddp.deterministic", parallel.ddp.deterministic,
                "sum gradients and losses in a fixed order (bitwise equal for any split over ranks; no overlap)"),
       INT_KEY("ddp.shards", parallel.ddp.shards, 0, kMaxBatch,
               "deterministic: shards of the global micro-batch (0 = one per rank; on 1 rank, N reproduces N ranks)"),
       INT_KEY("zero.stage", parallel.zero.stage, 0, 3,
               "ZeRO: 0 = plain data parallel, 1 = shard optimizer state, 2 = also gradients (overlapped "
               "reduce-scatter), 3 = also parameters (gathered per block, FSDP)"),
       INT_KEY("zero.prefetch", parallel.zero.prefetch, 0, model::kMaxLayers,
               "ZeRO stage 3: blocks gathered ahead of the one computing"),
       {"zero.offload",
        {"string",
         "none | optimizer (moments, master weights, optimizer step in the host pool) | params (stage 3: "
         "also the parameter shard)",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           PARALLM_CHECK(v == "none" || v == "optimizer" || v == "params", ConfigError, "config",
                         "{}: expected none, optimizer or params, got \"{}\"", k, v);
           c.parallel.zero.offload = parallel::parse_offload(v);
         },
         [](const RunConfig& c) { return nlohmann::json(parallel::offload_name(c.parallel.zero.offload)); },
         std::nullopt}},
       INT_KEY("parallel.dp", parallel.dp, 0, kMaxRanks, "data-parallel degree (0 = the world size / (tp x pp x cp))"),
       INT_KEY("parallel.tp", parallel.tp, 1, kMaxRanks, "tensor-parallel degree (ranks inside a node)"),
       INT_KEY("parallel.pp", parallel.pp, 1, kMaxRanks, "pipeline-parallel degree (stages)"),
       INT_KEY("parallel.cp", parallel.cp, 1, kMaxRanks,
               "context-parallel degree: each sequence split over this many ranks (parallel.cp_kind says how)"),
       INT_KEY("parallel.ep", parallel.ep, 1, kMaxRanks,
               "expert-parallel degree: each MoE layer's experts split over groups of this many of the dp x cp ranks, "
               "which exchange tokens by all-to-alls (it divides dp x cp and model.moe_experts)"),
       {"parallel.cp_kind",
        {"string",
         "ring | ulysses: context parallelism's attention: K/V blocks passed around a ring (zigzag split, any "
         "heads) or all-to-alls to whole sequences of n_head/(tp x cp) heads",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           if (v == "ring")
             c.parallel.cp_kind = model::CpKind::Ring;
           else if (v == "ulysses")
             c.parallel.cp_kind = model::CpKind::Ulysses;
           else
             throw ConfigError("config", fmt::format("{}='{}' is not one of ring, ulysses", k, v));
         },
         [](const RunConfig& c) { return nlohmann::json(model::cp_kind_name(c.parallel.cp_kind)); }, std::nullopt}},
       BOOL_KEY("parallel.tp_across_nodes", parallel.tp_across_nodes,
                "allow a tensor-parallel group to span nodes (a warning: its exchanges then cross the network)"),
       BOOL_KEY("parallel.sequence_parallel", parallel.sequence_parallel,
                "Megatron sequence parallelism: LayerNorm, dropout and the residual stream split by tokens over the "
                "tensor-parallel group (needs parallel.tp > 1)"),
       {"parallel.pp_schedule",
        {"string", "gpipe | 1f1b | interleaved | zb-h1: the pipeline's schedule (parallm pipeline draws each)",
         [](RunConfig& c, const std::string&, const std::string& v) {
           c.parallel.pp_schedule = parallel::parse_pipe_kind(v);
         },
         [](const RunConfig& c) { return nlohmann::json(parallel::pipe_kind_name(c.parallel.pp_schedule)); },
         std::nullopt}},
       INT_KEY("parallel.pp_virtual", parallel.pp_virtual, 1, model::kMaxLayers,
               "chunks (virtual stages) per pipeline rank: > 1 with parallel.pp_schedule=interleaved"),
       {"parallel.pp_layers",
        {"string",
         "layers per virtual stage, comma-separated in stage order (e.g. 3,4,4,3); empty: as even as the layers allow",
         [](RunConfig& c, const std::string& k, const std::string& v) {
           c.parallel.pp_layers = v.empty() ? std::vector<int64_t>{} : parse_int_list(v, "config", k);
         },
         [](const RunConfig& c) {
           std::string out;
           for (int64_t n : c.parallel.pp_layers) {
             if (!out.empty()) out += ',';
             out += std::to_string(n);
           }
           return nlohmann::json(out);
         },
         std::nullopt}}});
}

// train.skip_*: the loss-spike guard (train/controls/spike_guard.h).
void add_spike_guard_keys(KeyTable& t) {
  t.insert(
      {FLOAT_KEY("train.skip_loss_zscore", train.skip_loss_zscore, closed(0, 1e6),
                 "loss-spike guard: skip a step whose loss is more than this many standard deviations above the mean "
                 "of the last train.skip_window applied steps (0 = off)"),
       FLOAT_KEY("train.skip_grad_zscore", train.skip_grad_zscore, closed(0, 1e6),
                 "loss-spike guard: the same for the global gradient norm (0 = off)"),
       INT_KEY("train.skip_window", train.skip_window, 2, 1000000,
               "loss-spike guard: applied steps the mean and deviation are taken over; the guard acts once it is full"),
       INT_KEY("train.skip_max_consecutive", train.skip_max_consecutive, 0, INT32_MAX,
               "loss-spike guard: more skipped steps in a row than this stop the run with an error")});
}

}  // namespace

// A switch's directory must exist before the run starts: a typo there would
// otherwise leave a switch nobody can pull.
void check_switch(const std::string& key, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  PARALLM_CHECK(fs::is_directory(dir, ec), ConfigError, "config",
                "{}={}: the directory {} does not exist (create it first, so that the switch can be pulled)", key, path,
                dir.string());
  PARALLM_CHECK(!fs::is_directory(path, ec), ConfigError, "config",
                "{}={}: is a directory; the switch is a file that appears (touch it) when wanted", key, path);
}

// Every key, in one table: --help-keys prints it, set() and to_json() read it.
const KeyTable& keys() {
  static const KeyTable table = [] {
    KeyTable t;
    add_model_keys(t);
    add_moe_keys(t);
    add_train_keys(t);
    add_train_run_keys(t);
    add_train_check_keys(t);
    add_optimizer_keys(t);
    add_run_keys(t);
    add_control_keys(t);
    add_parallel_keys(t);
    add_spike_guard_keys(t);
    return t;
  }();
  return table;
}

}  // namespace parallm::train::config_table
