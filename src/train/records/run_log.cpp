#include "train/records/run_log.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/gpu.h"
#include "core/log.h"
#include "core/text.h"
#include "core/threads.h"
#include "kernels/bf16.h"
#include "parallel/group_ops.h"

namespace parallm::train {

namespace {

std::string memory_line(const MemStats& s) {
  std::string line = "memory:";
  for (int c = 0; c < static_cast<int>(MemCategory::kCount); ++c)
    if (s.peak[c] > 0)
      line += fmt::format(" {} {}", mem_category_name(static_cast<MemCategory>(c)), format_bytes(s.peak[c]));
  return line + fmt::format(" | peak total {}", format_bytes(s.total_peak));
}

// Per-rank bytes per parameter of the training state (ZeRO's accounting).
std::string state_table(const MemStats& s, int64_t nparams) {
  auto cat = [&](MemCategory c) { return s.peak[static_cast<int>(c)]; };
  const size_t p = cat(MemCategory::Params), g = cat(MemCategory::Grads), o = cat(MemCategory::OptState);
  const auto n = static_cast<double>(nparams);
  return fmt::format(
      "training state per rank (peak): params {} ({:.2f} B/param) + grads {} ({:.2f}) + optimizer {} ({:.2f}) = {} "
      "({:.2f} B/param); communication buffers {} ({:.2f}); offloaded to the host pool {} ({:.2f})",
      format_bytes(p), static_cast<double>(p) / n, format_bytes(g), static_cast<double>(g) / n, format_bytes(o),
      static_cast<double>(o) / n, format_bytes(p + g + o), static_cast<double>(p + g + o) / n,
      format_bytes(cat(MemCategory::Comm)), static_cast<double>(cat(MemCategory::Comm)) / n,
      format_bytes(cat(MemCategory::Offloaded)), static_cast<double>(cat(MemCategory::Offloaded)) / n);
}

void log_precision(const Session& s) {
  const RunConfig& cfg = s.cfg;
  if (!s.dev.is_cpu() && cfg.train.dtype == Precision::FP8 && cfg.train.fp8_tensorwise &&
      gpu::compute_capability(s.dev.index) < 89)
    log::warn("train.fp8_scaling=tensorwise on sm_{}: no FP8 tensor cores before sm_89, so the products run {}",
              gpu::compute_capability(s.dev.index),
              cfg.train.fp8_bf16_activations ? "in bf16 (not rounded to FP8)" : "as FP8 values on bf16 tensor cores");
  if (!s.dev.is_cpu())
    log::info(
        "device: {} {} | {} | {}", s.dev.str(), gpu::describe(s.dev.index), gpu::version(),
        cfg.train.dtype == Precision::BF16 ? "bf16 mixed precision (fp32 master weights, gradients and optimizer "
                                             "state)"
        : cfg.train.dtype == Precision::FP16
            ? "fp16 products (operands rounded to binary16, fp16 tensor cores, fp32 accumulation), fp32 activations "
              "and state"
        : cfg.train.dtype == Precision::FP8 && cfg.train.fp8_bf16_activations
            ? "FP8 products on FP8 tensor cores (one scale per tensor; sm_89 and later, every dimension a multiple of "
              "16, else bf16 products), bf16 activations (train.fp8_activations=bf16), fp32 master weights, "
              "gradients and optimizer state"
        : cfg.train.dtype == Precision::FP8 && cfg.train.fp8_tensorwise
            ? "FP8 products (one scale per tensor, rounded to E4M3 / E5M2 as on the CPU; on FP8 tensor cores from "
              "sm_89 where every dimension is a multiple of 16, else bf16 ones), fp32 activations and state"
        : cfg.train.dtype == Precision::FP8
            ? "FP8 products (rows scaled and rounded to E4M3 / E5M2 as on the CPU, on bf16 tensor cores; "
              "train.fp8_scaling=tensorwise runs FP8 tensor cores), fp32 activations and state"
            : "fp32");
  else if (s.model->bf16_products())
    log::info(
        "dtype: bf16 mixed precision on the CPU: bf16 products ({}) with fp32 accumulation; activations, "
        "weights, gradients and optimizer state fp32",
        kernels::bf16_products_impl());
  else if (s.model->cpu_products() == model::CpuProducts::F16)
    log::info(
        "dtype: fp16 mixed precision on the CPU: fp16 products (emulated: operands rounded to binary16, the fp32 "
        "GEMM) with fp32 accumulation; activations, weights, gradients and optimizer state fp32");
  else if (s.model->cpu_products() != model::CpuProducts::Fp32)
    log::info(
        "dtype: FP8 on the CPU (emulated): the linear layers' operands scaled per row by powers of two and rounded "
        "to E4M3 (inputs, weights) or E5M2 (output gradients), fp32 accumulation; bf16-rounded products in the "
        "head{}; activations, weights, gradients and optimizer state fp32",
        s.model->cpu_products() == model::CpuProducts::Fp8Ends ? " and the first and last blocks" : "");
  const optim::LossScaler& scaler = *s.scaler;
  if (scaler.dynamic())
    log::info(
        "loss scaling: dynamic from {:g} (a step whose gradients overflow is skipped and the scale halves; it "
        "doubles after {} finite steps)",
        scaler.state().scale, cfg.train.loss_scale_window);
  else if (scaler.active())
    log::info("loss scaling: static {:g}", scaler.state().scale);
}

}  // namespace

namespace {
// The step's choice digest (MoeTally::choices) over the global batch: every rank's wrapping sum over the data group
// (each rank routes its own tokens; tp ranks route the same ones), then over the pipeline's stages.
uint64_t global_choices(const Session& s, uint64_t mine) {
  uint64_t sum = parallel::GroupSumOf<uint64_t>(s.plan->grad_group())(mine);
  const std::vector<int64_t> stages = s.plan->by_stage(static_cast<int64_t>(sum));
  if (!stages.empty())
    sum = std::accumulate(stages.begin(), stages.end(), uint64_t{0},
                          [](uint64_t a, int64_t b) { return a + static_cast<uint64_t>(b); });
  return sum;
}

// An MoE model's step: the balancing terms (a micro-batch's mean) and the
// tokens each expert got in each MoE layer (the step's choices over the
// global batch), every stage's layers; the imbalance is the largest layer's
// max / mean. Returns the log line's part.
std::string moe_record(const Session& s, nlohmann::json& rec) {
  const model::GPTConfig& m = s.cfg.model;
  const auto t = s.model->take_moe_tally();
  const auto gas = static_cast<double>(s.cfg.optimizer.gas);
  std::vector<float> v = {static_cast<float>(t.aux / gas), static_cast<float>(t.z / gas),
                          static_cast<float>(t.dropped)};
  v.insert(v.end(), t.tokens.begin(), t.tokens.end());
  s.plan->sum_over_stages(v.data(), static_cast<int64_t>(v.size()));
  rec["moe_aux_loss"] = v[0];
  rec["moe_z_loss"] = v[1];
  nlohmann::json layers = nlohmann::json::array();
  double imbalance = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) {
    if (!m.moe_layer(l)) continue;
    const float* c = v.data() + 3 + l * m.moe.experts;
    std::vector<int64_t> counts(c, c + m.moe.experts);
    const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    if (total > 0)
      imbalance = std::max(imbalance, static_cast<double>(*std::max_element(counts.begin(), counts.end())) *
                                          static_cast<double>(m.moe.experts) / total);
    layers.push_back(std::move(counts));
  }
  rec["moe_tokens"] = std::move(layers);
  rec["moe_choices"] = fmt::format("{:016x}", global_choices(s, t.choices));  // every token's choices, hashed
  rec["moe_imbalance"] = imbalance;
  if (m.moe.capacity > 0) rec["moe_dropped"] = static_cast<int64_t>(v[2]);  // choices, every layer and micro-batch
  return fmt::format(", moe aux {:.4g} z {:.4g} imbalance {:.2f}{}", v[0], v[1], imbalance,
                     m.moe.capacity > 0 ? fmt::format(" dropped {}", static_cast<int64_t>(v[2])) : "");
}
}  // namespace

void log_run(const Session& s) {
  const RunConfig& cfg = s.cfg;
  const int64_t B = s.batch(), gas = cfg.optimizer.gas, dp = s.data_ranks();
  const int n = s.world.size();
  log::info("parallm train: {} | {} threads", cfg.model.summary(), num_threads());
  log::info("number of parameters: {:.2f}M", static_cast<double>(s.model->num_params_nanogpt()) / 1e6);
  if (cfg.model.moe.experts > 0)
    log::info("active parameters per token: {:.2f}M of {:.2f}M (MoE: {} of {} experts)",
              static_cast<double>(cfg.model.active_params()) / 1e6, static_cast<double>(cfg.model.num_params()) / 1e6,
              cfg.model.moe.top_k, cfg.model.moe.experts);
  log::info(
      "world: {} rank{} ({} backend), mesh {}, global batch {} = micro batch {} x {} data-parallel rank{} x "
      "gas {}",
      n, n > 1 ? "s" : "", s.world.backend(), s.mesh->summary(), B * dp * gas, B, dp, dp > 1 ? "s" : "", gas);
  log::info("tokens per iteration will be: {} (global batch {} x block {})", s.tokens_per_iter, B * dp * gas, s.seq());
  if (const std::string split = s.plan->sequence_text(s.seq()); !split.empty()) log::info("{}", split);
  if (const std::string how = s.sync->describe(); !how.empty()) log::info("{}", how);
  log_precision(s);
  const std::string best = s.peak_measurements == 1
                               ? std::string(", one run's measurement so far")
                               : fmt::format(", the best of {} runs' measurements", s.peak_measurements);
  log::info("MFU peak: {:.1f} GFLOP/s ({})", s.peak / 1e9,
            cfg.train.peak_flops > 0   ? std::string("train.peak_flops")
            : s.model->bf16_products() ? "measured bf16 GEMM" + best
            : s.dev.is_cpu()           ? "measured fp32 GEMM" + best
                                       : std::string("the GPU's dense bf16 tensor-core peak"));
}

namespace {
// Every log interval with several ranks: the fastest and slowest rank's
// compute (collective over the world), into the record; a straggler named
// in rank 0's log. Returns the log line's part.
std::string straggler_report(const Session& s, int64_t it, const StepResult& r, nlohmann::json& rec) {
  if (!s.straggler) return "";
  s.straggler->add(r.compute);
  if (it % s.cfg.train.log_interval != 0) return "";
  const StragglerReport::Interval iv = s.straggler->gather();
  rec["step_ms_min"] = iv.min_ms;
  rec["step_ms_max"] = iv.max_ms;
  rec["fastest_rank"] = iv.fastest;
  rec["slowest_rank"] = iv.slowest;
  if (!iv.stragglers.empty()) {
    rec["stragglers"] = iv.stragglers;
    if (s.lead) log::warn("{}", iv.warning);
  }
  return fmt::format(", compute {:.1f}ms (rank {}) .. {:.1f}ms (rank {})", iv.min_ms, iv.fastest, iv.max_ms,
                     iv.slowest);
}
}  // namespace

void record_step(const Session& s, int64_t it, float lr, const StepResult& r) {
  const double tok_s = static_cast<double>(s.tokens_per_iter) / r.dt;
  const double mfu = s.flops_per_iter / r.dt / s.peak;
  nlohmann::json rec{{"kind", "train"},
                     {"step", it},
                     {"batch", s.cfg.train.skip_batches.data_index(it)},  // the global batch it read
                     {"loss", r.loss},
                     {"lr", lr},
                     {"dt_ms", r.dt * 1e3},
                     {"dtf_ms", r.dtf * 1e3},
                     {"dtb_ms", r.dtb * 1e3},
                     {"tokens_per_s", tok_s},
                     {"mfu", mfu}};
  if (std::isfinite(r.norm)) rec["grad_norm"] = r.norm;  // an overflowed step's is not
  if (r.rss_bytes > 0) rec["rss_mb"] = static_cast<double>(r.rss_bytes) / (1 << 20);
  if (s.scaler->active()) rec["loss_scale"] = r.scale;
  if (s.scaler->dynamic() || s.guard) rec["skipped"] = !r.applied;
  if (!r.skip_reason.empty()) rec["skip_reason"] = r.skip_reason;  // e.g. "loss z-score 7.3 > 5"
  if (!r.stage_idle.empty()) {
    rec["pp_idle"] = r.stage_idle;        // per stage: the measured bubble
    rec["pp_cost_ms"] = r.stage_cost_ms;  // per stage: mean ms per F, B, B-input, W
  }
  std::string moe;
  if (s.cfg.model.moe.experts > 0) moe = moe_record(s, rec);
  const parallel::SyncStats stats = s.sync->stats();
  for (const auto& f : stats.fields)
    rec[f.key] = f.integer ? nlohmann::json(static_cast<int64_t>(f.value)) : nlohmann::json(f.value);
  const std::string spread = straggler_report(s, it, r, rec);
  s.write_metrics(rec);
  if (it % s.cfg.train.log_interval == 0)
    s.progress->print(fmt::format(
        "iter {}: loss {:.4f}, lr {:.2e}, dt {:.1f}ms, dtf {:.1f}ms, dtb {:.1f}ms, tok/s {:.0f}, mfu {:.2f}%{}", it,
        r.loss, lr, r.dt * 1e3, r.dtf * 1e3, r.dtb * 1e3, tok_s, mfu * 100,
        moe + stats.text + spread + (s.scaler->active() ? fmt::format(", loss scale {:g}", r.scale) : "")));
  s.progress->update(it, fmt::format("loss {:.4f} tok/s {:.0f}", r.loss, tok_s));
}

void report_memory(const Session& s, int64_t it) {
  const MemStats ms = HostAllocator::instance().stats();
  s.progress->print(memory_line(ms));
  s.progress->print(state_table(ms, s.model->layout().count()));
  if (const std::string note = s.sync->memory_note(ms); !note.empty()) s.progress->print(note);
  if (!s.dev.is_cpu()) s.progress->print("GPU " + memory_line(gpu::device_stats()));
  nlohmann::json mrec{{"step", it}};
  for (int c = 0; c < static_cast<int>(MemCategory::kCount); ++c)
    mrec[std::string(mem_category_name(static_cast<MemCategory>(c))) + "_bytes"] = ms.peak[c];
  mrec["total_peak_bytes"] = ms.total_peak;
  // Pipeline: every stage's peak activation bytes.
  const auto stages = s.plan->by_stage(static_cast<int64_t>(ms.peak[static_cast<int>(MemCategory::Activations)]));
  if (!stages.empty()) mrec["stage_activations_bytes"] = stages;
  if (s.run_dir) s.run_dir->write_memory(mrec);
}

}  // namespace parallm::train
