// `parallm plan [config.yaml] [key=value ...] [-n RANKS] [--params COUNT] [--dtype fp32|bf16] [--device-mem BYTES]`
// Per-rank memory of a training run at every ZeRO stage, predicted from the
// model's and ZeRO's own sizing (train/config/plan.h), the seeds' quick rules, and
// the stage that fits with the least communication.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/vocab.h"
#include "model/params.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_runtime.h"
#include "train/config/config.h"
#include "train/config/plan.h"

namespace parallm::cli {

namespace {

parallel::PipelineConfig pipeline_config(const train::RunConfig& cfg) {
  return parallel::PipelineConfig::of(cfg.parallel, cfg.optimizer.gas, cfg.model.n_layer);
}

// Bytes in binary units, computed in double: never wraps, whatever the count.
std::string gb(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

// "4 ranks (dp 2 x tp 2)".
std::string mesh_text(const parallel::MeshDims& d) {
  const int n = d.dp * d.tp * d.pp * d.cp;
  std::string axes = fmt::format("dp {}", d.dp);
  for (const auto& [name, v] : {std::pair{"tp", d.tp}, std::pair{"pp", d.pp}, std::pair{"cp", d.cp}})
    if (v > 1) axes += fmt::format(" x {} {}", name, v);
  if (d.ep > 1) axes += fmt::format(", ep {} inside dp x cp", d.ep);
  return fmt::format("{} rank{}{}", n, n > 1 ? "s" : "", n > 1 ? " (" + axes + ")" : "");
}

// The job's `world` ranks (0: the layout's smallest job) arranged as train
// arranges them: a layout train refuses is refused here too.
parallel::MeshDims job_dims(const train::RunConfig& cfg, int world) {
  int64_t dp = std::max<int64_t>(cfg.parallel.dp, 1);
  if (cfg.parallel.dp == 0)  // the fewest data-parallel ranks expert parallelism divides
    while ((dp * cfg.parallel.cp) % cfg.parallel.ep != 0) ++dp;
  const int64_t smallest = dp * cfg.parallel.tp * cfg.parallel.pp * cfg.parallel.cp;
  return parallel::resolve_mesh_dims(cfg.mesh_dims(), world > 0 ? world : static_cast<int>(smallest), 0, true);
}

constexpr double kMaxParams = 1e15;  // --params: a quadrillion (16 PB of fp32 training state)

struct PlanOptions {
  std::vector<std::string> args;
  int world = 0;  // 0: the layout's smallest job
  int stage = 0;
  std::string params, dtype, device_mem;  // dtype "": the configuration's (train.dtype)
};

// " | pp 4 1f1b: stage 0 of layers [0, 3), 4 micro-batches in flight".
std::string pipeline_text(const train::RunConfig& cfg, const model::PipelinePart& p, int stage) {
  std::string chunks, sets;
  for (size_t c = 0; c < p.stage.chunks.size(); ++c) {
    chunks += fmt::format("{}[{}, {})", c ? " " : "", p.stage.chunks[c].begin, p.stage.chunks[c].end);
    sets += fmt::format("{}{}", c ? "+" : "", p.in_flight[c]);
  }
  return fmt::format(" | pp {} {}: stage {} of layers {}, {} micro-batches in flight", cfg.parallel.pp,
                     parallel::pipe_kind_name(cfg.parallel.pp_schedule), stage, chunks, sets);
}

// What the plan is for, from the job's layout and the configuration (the
// model's size is set later, by plan_subject()).
train::PlanInput plan_input(const train::RunConfig& cfg, const PlanOptions& o, const parallel::MeshDims& dims) {
  train::PlanInput in;
  // bf16 activations on a GPU (train.dtype=bf16, or fp8 with train.fp8_activations=bf16) plan as bf16; the CPU's
  // bf16 (fp32 activations and state, bf16 products), fp16 and FP8 with fp32 activations: fp32.
  in.dtype = !o.dtype.empty()                                                   ? o.dtype
             : cfg.compute_dtype() == DType::BF16 && !cfg.train.device.is_cpu() ? "bf16"
                                                                                : "fp32";
  in.world = dims.dp;
  in.tp = static_cast<int>(cfg.parallel.tp);
  in.ep = static_cast<int>(cfg.parallel.ep);
  in.sequence_parallel = cfg.parallel.sequence_parallel;
  in.cp = model::CpLayout{static_cast<int>(cfg.parallel.cp), 0, cfg.parallel.cp_kind};
  PARALLM_CHECK(o.stage < cfg.parallel.pp, ConfigError, "cli.plan",
                "--stage {} is not a stage of parallel.pp={} (stages 0 to {})", o.stage, cfg.parallel.pp,
                cfg.parallel.pp - 1);
  if (cfg.parallel.pp > 1) in.pipe = parallel::Pipeline::stage_part(pipeline_config(cfg), o.stage);
  in.prefetch = static_cast<int>(cfg.parallel.zero.prefetch);
  in.offload = cfg.parallel.zero.offload;
  in.micro_batch = cfg.train.batch_size;
  in.seq_len = cfg.model.block_size;
  in.threads = cfg.train.threads > 0 ? static_cast<int>(cfg.train.threads) : num_threads();
  return in;
}

// The model's size (--params, or the model's shape) into `in`, and the plan's
// first line, which says what was planned.
std::string plan_subject(train::RunConfig& cfg, train::PlanInput& in, const PlanOptions& o) {
  if (!o.params.empty()) {
    PARALLM_CHECK(in.tp == 1 && cfg.parallel.pp == 1, ConfigError, "cli.plan",
                  "--params gives the whole model's size, which parallel.tp={} x parallel.pp={} does not split by a "
                  "rule; give the model's shape (model.* keys) to plan a tensor- or pipeline-parallel rank",
                  in.tp, cfg.parallel.pp);
    in.params = train::parse_count(o.params, "--params");
    PARALLM_CHECK(in.params >= 1 && in.params <= kMaxParams, ConfigError, "cli.plan",
                  "--params {} is out of range: give a parameter count in [1, {:g}] (e.g. 124M, 80B, 1T)", o.params,
                  kMaxParams);
    return fmt::format("{:.4g}B parameters", in.params / 1e9);
  }
  if (!cfg.vocab_size_set) {  // the dataset's (a regular file, its meta.json checked strictly)
    try {
      cfg.model.vocab_size = data::Vocab::load(cfg.data.dir).size();
    } catch (const IoError& e) {
      throw ConfigError("cli.plan", fmt::format("no vocabulary size: set model.vocab_size=V, or data.dir to a "
                                                "prepared dataset ({})",
                                                e.message()));
    }
  }
  cfg.model.validate();  // again, with the dataset's vocabulary
  in.model = cfg.model;
  in.params = static_cast<double>(model::ParamLayout(cfg.model, {in.tp, 0, in.ep, 0}, in.pipe.stage).count());
  const std::string moe =  // a mixture of experts: the whole model's total and active parameters, and ep
      cfg.model.moe.experts == 0
          ? ""
          : fmt::format(
                " (of {:.2f}M in all, {:.2f}M active per token{})", static_cast<double>(cfg.model.num_params()) / 1e6,
                static_cast<double>(cfg.model.active_params()) / 1e6,
                in.ep > 1 ? fmt::format("; ep {}: {} experts a rank", in.ep, cfg.model.moe.experts / in.ep) : "");
  const bool part = in.tp > 1 || in.ep > 1 || in.pipe.pipelined();
  return fmt::format("{} | {:.2f}M parameters{}{} | micro batch {} x {} | {} thread{}{}{}{}", cfg.model.summary(),
                     in.params / 1e6, part ? " on this rank" : "", moe, in.micro_batch, in.seq_len, in.threads,
                     in.threads > 1 ? "s" : "",
                     in.tp > 1 ? fmt::format(" | tp {}{}", in.tp, in.sequence_parallel ? " + sp" : "") : "",
                     in.cp.size > 1 ? fmt::format(" | cp {} {}: {} positions a rank", in.cp.size,
                                                  model::cp_kind_name(in.cp.kind), in.seq_len / in.cp.size)
                                    : "",
                     in.pipe.pipelined() ? pipeline_text(cfg, in.pipe, o.stage) : "");
}

// Per-rank peak bytes at each ZeRO stage, one line a stage.
void print_stage_table(const train::RunConfig& cfg, const train::PlanInput& in, bool exact) {
  std::printf("per-rank peak bytes (rank 0 holds the largest shards)%s:\n",
              exact ? ""
                    : "; training state only (no model shape, or bf16 by the quick rule; CPU bf16 keeps fp32 state: "
                      "plan it as fp32 plus 2 B/param for its bf16 weight copy)");
  std::printf("  %-13s %11s %11s %11s %11s %11s %11s %11s %9s %11s\n", "zero.stage", "params", "grads", "optimizer",
              "activations", "comm", "scratch", "total", "state/p", "host pool");
  for (int s = 0; s <= 3; ++s) {
    if (s >= 2 && in.pipe.pipelined()) {
      std::printf("  %-13d (not with parallel.pp > 1: a stage's gradients accumulate across its micro-batches)\n", s);
      continue;
    }
    const auto b = train::plan_memory(in, s);
    const std::string name = fmt::format("{}{}{}", s, s == 3 ? fmt::format(" (pf {})", in.prefetch) : "",
                                         s == cfg.parallel.zero.stage ? " *" : "");
    std::printf("  %-13s %11s %11s %11s %11s %11s %11s %11s %7.2f B %11s\n", name.c_str(), gb(b.params).c_str(),
                gb(b.grads).c_str(), gb(b.optimizer).c_str(), exact ? gb(b.activations).c_str() : "-",
                exact ? gb(b.comm).c_str() : "-", exact ? gb(b.scratch).c_str() : "-", gb(b.total()).c_str(),
                b.state() / in.params, gb(b.offloaded).c_str());
  }
  std::printf(
      "  (* zero.stage as configured; total: device memory; state/p: params + grads + optimizer per parameter on "
      "the device; host pool: zero.offload=%s)\n",
      parallel::offload_name(in.offload));
}

// Every pipeline stage at the configured ZeRO stage (the largest may not be stage 0).
void print_pipeline_stages(const train::RunConfig& cfg, const train::PlanInput& in, int planned) {
  std::printf("every pipeline stage at zero.stage=%d (--stage R plans one):\n",
              static_cast<int>(cfg.parallel.zero.stage));
  train::PlanInput each = in;
  for (int r = 0; r < cfg.parallel.pp; ++r) {
    each.pipe = parallel::Pipeline::stage_part(pipeline_config(cfg), r);
    const auto b = train::plan_memory(each, static_cast<int>(cfg.parallel.zero.stage));
    std::printf("  stage %-3d activations %11s total %11s%s\n", r, gb(b.activations).c_str(), gb(b.total()).c_str(),
                r == planned ? " (above)" : "");
  }
}

// --device-mem: the GPUs the quick rule needs, and the ZeRO stage that fits.
void print_device_fit(const train::PlanInput& in, const std::string& device_mem) {
  const double dev = train::parse_bytes(device_mem, "--device-mem");
  PARALLM_CHECK(dev >= 1 && dev <= 1e18, ConfigError, "cli.plan",
                "--device-mem {} is out of range: give one device's memory in [1 B, 1000 PB] (e.g. 80GB)", device_mem);
  std::printf("GPUs needed (the seeds' rule, params_in_billions x 18 x 1.25 / GPU_GB): %lld of %s each\n",
              static_cast<long long>(train::gpus_needed(in.params, dev / 1e9)), device_mem.c_str());
  const int fit = train::stage_that_fits(in, dev);
  if (fit < 0)
    std::printf("fits in %s: no stage on %d data-parallel rank%s; add ranks\n", device_mem.c_str(), in.world,
                in.world > 1 ? "s" : "");
  else
    std::printf(
        "fits in %s: zero.stage=%d (the least communication that fits: stages 0-2 move about 2x the "
        "gradient bytes per step, stage 3 about 3x)\n",
        device_mem.c_str(), fit);
}

int run_plan(const PlanOptions& o) {
  train::RunConfig cfg = run_config_from_args(o.args, "cli.plan");
  cfg.check_ranges();  // every key in its documented range: refused at once, never planned for minutes
  const parallel::MeshDims dims = job_dims(cfg, o.world);
  train::PlanInput in = plan_input(cfg, o, dims);
  const std::string what = plan_subject(cfg, in, o);
  std::printf("parallm plan: %s | %s | %s\n", what.c_str(), in.dtype.c_str(), mesh_text(dims).c_str());
  const bool exact = train::plan_memory(in, 0).exact;
  print_stage_table(cfg, in, exact);
  if (in.pipe.pipelined() && exact && cfg.parallel.zero.stage < 2) print_pipeline_stages(cfg, in, o.stage);
  std::printf(
      "quick rules: mixed-precision AdamW keeps 18 B/param (2 bf16 weights + 4 fp32 grads + 12 fp32 master and "
      "moments; fp32 training 16), so %.4g parameters need %.1f GB (%s) of training state before sharding\n",
      in.params, in.params * (in.dtype == "bf16" ? 18.0 : 16.0) / 1e9,
      gb(in.params * (in.dtype == "bf16" ? 18.0 : 16.0)).c_str());
  if (!o.device_mem.empty()) print_device_fit(in, o.device_mem);
  return 0;
}
}  // namespace

Runner add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Predict per-rank memory for each ZeRO stage, and what fits");
  auto o = std::make_shared<PlanOptions>();
  cmd->add_option("args", o->args, "[config.yaml] key=value ... (the keys of parallm train)");
  cmd->add_option("-n,--world", o->world,
                  "the job's ranks, as launch -n (default: the layout's smallest job, parallel.dp or 1 x tp x pp x "
                  "cp); ZeRO shards over its data-parallel ranks")
      ->check(int_in(1, kMaxRanks));
  cmd->add_option("--stage", o->stage, "with parallel.pp > 1: the pipeline stage (pp rank) to plan (default 0)")
      ->check(int_in(0, kMaxRanks));
  cmd->add_option("--params", o->params, "a parameter count instead of a model shape (e.g. 80B, 124M; at most 1e15)");
  cmd->add_option("--dtype", o->dtype,
                  "fp32, or bf16 (mixed-precision AdamW, 18 B/param); default: the configuration's train.dtype "
                  "(bf16 activations on a GPU: bf16, else fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--device-mem", o->device_mem, "memory of one device (e.g. 80GB, 24GiB): which stage fits");
  cmd->footer(
      "Examples: parallm plan configs/baby_gpt.yaml -n 4 model.batch_size=16\n"
      "          parallm plan --params 80B --dtype bf16 --device-mem 80GB");
  return [o]() { return run_plan(*o); };
}

}  // namespace parallm::cli
