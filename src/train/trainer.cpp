#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>

#include "comm/communicator.h"
#include "core/env.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/log.h"
#include "core/profiler.h"
#include "core/text.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/vocab.h"
#include "kernels/bf16.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "optim/schedule.h"
#include "parallel/ddp.h"
#include "parallel/deterministic.h"
#include "parallel/zero.h"
#include "train/agree.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/peak.h"
#include "train/run_checks.h"
#include "train/run_dir.h"
#include "train/sample.h"

namespace parallm::train {

namespace {

std::string memory_line(const MemStats& s) {
  std::string line = "memory:";
  for (int c = 0; c < static_cast<int>(MemCategory::kCount); ++c)
    if (s.peak[c] > 0)
      line += fmt::format(" {} {}", mem_category_name(static_cast<MemCategory>(c)), format_bytes(s.peak[c]));
  return line + fmt::format(" | peak total {}", format_bytes(s.total_peak));
}

// One float averaged over the world, through a buffer allocated once.
class WorldMean {
 public:
  explicit WorldMean(comm::Communicator& w) : w_(w), t_(Tensor::empty({1}, DType::F32)) {}
  float operator()(float v) {
    if (w_.size() == 1) return v;
    t_.data<float>()[0] = v;
    w_.all_reduce(t_, comm::ReduceOp::Avg);
    return t_.data<float>()[0];
  }

 private:
  comm::Communicator& w_;
  Tensor t_;
};

// True on every rank when it is true on every rank (one int, made once).
class WorldAll {
 public:
  explicit WorldAll(comm::Communicator& w) : w_(w), t_(Tensor::empty({1}, DType::I32)) {}
  bool operator()(bool v) {
    if (w_.size() == 1) return v;
    t_.data<int32_t>()[0] = v ? 1 : 0;
    w_.all_reduce(t_, comm::ReduceOp::Min);
    return t_.data<int32_t>()[0] != 0;
  }

 private:
  comm::Communicator& w_;
  Tensor t_;
};

void broadcast_floats(comm::Communicator& w, float* p, int64_t n) {
  if (w.size() > 1) w.broadcast(Tensor::view_of(p, {n}, DType::F32), 0);
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

// Rank 0's values of the few scalars a resumed run continues from.
void broadcast_state(comm::Communicator& w, TrainState& st, optim::AdamW& opt) {
  if (w.size() == 1) return;
  // Floats: best val loss (an fp32 loss, so exact), loss scale (a power of two <= 2^64, exact).
  Tensor t = Tensor::empty({2}, DType::F32);
  Tensor it = Tensor::empty({5}, DType::I32);
  const optim::LossScaleState ls = st.loss_scale.value_or(optim::LossScaleState{});
  t.data<float>()[0] = static_cast<float>(st.best_val_loss);
  t.data<float>()[1] = static_cast<float>(ls.scale);
  it.data<int32_t>()[0] = static_cast<int32_t>(st.iter);
  it.data<int32_t>()[1] = static_cast<int32_t>(opt.steps_taken());
  it.data<int32_t>()[2] = st.loss_scale ? 1 : 0;
  it.data<int32_t>()[3] = static_cast<int32_t>(ls.good_steps);
  it.data<int32_t>()[4] = static_cast<int32_t>(ls.skipped);
  w.broadcast(t, 0);
  w.broadcast(it, 0);
  st.best_val_loss = t.data<float>()[0];
  st.iter = it.data<int32_t>()[0];
  opt.set_steps_taken(it.data<int32_t>()[1]);
  st.loss_scale.reset();
  if (it.data<int32_t>()[2])
    st.loss_scale = optim::LossScaleState{t.data<float>()[1], it.data<int32_t>()[3], it.data<int32_t>()[4]};
}

// PARALLM_FAULT_INF_GRAD="3,7": iterations whose reduced gradients get an
// inf written into them on every rank, to exercise overflow handling.
std::vector<int64_t> fault_inf_grad_iters() {
  const char* list = env::get(env::Var::FaultInfGrad);
  return list ? parse_int_list(list, "train", "PARALLM_FAULT_INF_GRAD") : std::vector<int64_t>{};
}

void write_inf(float* p, Device dev) {
  const float inf = std::numeric_limits<float>::infinity();
  if (dev.is_cpu())
    *p = inf;
  else
    gpu::memcpy_h2d(p, &inf, sizeof(float));
}

// The run itself; run_dir is opened (by the lead rank) once every check has passed.
RunSummary train_run(RunConfig cfg, comm::Communicator& world, std::optional<RunDir>& run_dir) {
  const int rank = world.rank(), nranks = world.size();
  const bool lead = rank == 0;  // rank 0 writes files, logs, samples and checkpoints
  const bool resume = cfg.init_from == "resume";
  const std::vector<int64_t> fault_inf = fault_inf_grad_iters();  // before anything is written
  nlohmann::json ck_meta;
  std::string resume_changes;  // "key=new (was old), ..."
  if (resume) {
    ck_meta = read_checkpoint_meta(cfg.out_dir);
    // The checkpoint's run goes on, with the keys given here laid over it.
    std::vector<std::string> changed;
    cfg = cfg.resumed_from(ck_meta["config"], &changed);
    for (const auto& c : changed) resume_changes += (resume_changes.empty() ? "" : ", ") + c;
  }
  if (!lead) cfg.progress = false;
  check_ranks_agree(cfg, world);  // every rank, before any check or decision that could differ between them
  // Every check that needs no file comes before the dataset is read (the
  // vocabulary size, unless given, comes from it).
  if (cfg.vocab_size_set)
    cfg.validate();
  else
    cfg.check_ranges();
  const data::CharVocab vocab = dataset_vocabulary(cfg, resume ? &ck_meta["config"] : nullptr);
  cfg.validate();  // train.threads in range before libgomp is asked for them
  if (cfg.threads > 0) set_num_threads(static_cast<int>(cfg.threads));
  // Where a resumed run starts, and the records a stop on a full disk kept in its checkpoint.
  const int64_t ck_iter = resume ? checkpoint_state(ck_meta, nullptr).iter : 0;
  const nlohmann::json carried =
      resume ? ck_meta.value("unwritten_records", nlohmann::json::array()) : nlohmann::json::array();
  if (resume) {
    RunSummary done;
    done.nothing_to_do = nothing_left(cfg, ck_iter);
    if (!done.nothing_to_do.empty()) {
      // A queued job that finished before: no file is touched, except to write
      // the records a full disk kept in the checkpoint (a stop at the last steps).
      if (lead && !carried.empty()) {
        RunDir(cfg, RunDir::Mode::Records, ck_iter, carried);
        done.nothing_to_do += fmt::format(
            "; the {} metrics records a full disk kept in the checkpoint are now in {}/"
            "metrics.jsonl",
            carried.size(), cfg.out_dir);
      }
      return done;
    }
    verify_checkpoint(ck_meta, &world);  // every file's checksum, before anything is written
  }
  Device dev = parse_device(cfg.device);
  if (!dev.is_cpu()) {
    if (nranks > 1) {
      // Several GPU ranks: NCCL picked each rank's GPU (by local rank); "cuda" means that one.
      PARALLM_CHECK(world.gpu_device() >= 0, ConfigError, "config",
                    "train.device={} on {} ranks needs comm.backend=nccl (or auto), not {}", cfg.device, nranks,
                    world.backend());
      PARALLM_CHECK(cfg.device == "cuda" || dev.index == world.gpu_device(), ConfigError, "config",
                    "train.device={}: this rank's communicator runs on cuda:{} (chosen by local rank); use "
                    "train.device=cuda",
                    cfg.device, world.gpu_device());
      dev.index = world.gpu_device();  // ZeRO and ddp.deterministic are refused on GPUs by validate()
    }
    PARALLM_CHECK(dev.index < gpu::device_count(), ConfigError, "config",
                  "train.device={}: {} GPU{} visible to this process", cfg.device, gpu::device_count(),
                  gpu::device_count() == 1 ? " is" : "s are");
    gpu::set_device(dev.index);
  } else {
    PARALLM_CHECK(world.gpu_device() < 0, ConfigError, "config",
                  "train.device=cpu with comm.backend={}: NCCL moves GPU memory; use comm.backend=mpi for the CPU",
                  world.backend());
  }
  const int64_t B = cfg.batch_size, T = cfg.model.block_size;
  int64_t Bs = B;  // samples per forward pass: B unless one rank reproduces several deterministic shards
  if (cfg.ddp_deterministic) {
    PARALLM_CHECK(nranks == 1 || cfg.ddp_shards == 0 || cfg.ddp_shards == nranks, ConfigError, "config",
                  "ddp.shards={} on {} ranks: each rank is one shard there (leave ddp.shards unset)", cfg.ddp_shards,
                  nranks);
    const int64_t local = nranks == 1 && cfg.ddp_shards > 0 ? cfg.ddp_shards : 1;
    PARALLM_CHECK(B % local == 0, ConfigError, "config", "ddp.shards={} does not divide model.batch_size={}", local, B);
    Bs = B / local;
  }

  data::Loader loader(cfg.data_dir, cfg.model.vocab_size, {B, T, nranks, rank}, cfg.seed);
  const std::string prompt_text = cfg.sample_prompt.empty() ? "\n" : cfg.sample_prompt;
  if (cfg.sample_tokens > 0) {
    try {
      vocab.encode(prompt_text);
    } catch (const ConfigError& e) {
      throw ConfigError("config", fmt::format("train.sample_prompt: {}", e.message()));
    }
  }
  WorldMean world_mean(world);
  WorldAll world_all(world);
  if (!resume) {
    // Rank 0's directory decides (it is the one that writes), for every rank.
    const std::string refusal = lead ? scratch_refusal(cfg) : std::string();
    if (!world_all(refusal.empty()))
      throw ConfigError("config", lead ? refusal : "rank 0 refused train.out_dir (its error says why)");
  }
  if (lead) {
    using Mode = RunDir::Mode;
    run_dir.emplace(cfg, !resume ? Mode::Scratch : cfg.eval_only ? Mode::EvalOnly : Mode::Resume, ck_iter, carried);
  }
  if (!resume_changes.empty()) log::info("resume: the checkpoint's settings, except {}", resume_changes);
  auto write_metrics = [&](const nlohmann::json& rec) {
    if (run_dir) run_dir->write_metrics(rec);
  };

  // ZeRO: from stage 2 the model keeps no full gradient buffer, from stage 3
  // no parameters either: the Zero store holds shards and windows.
  const int zstage = static_cast<int>(cfg.zero_stage);
  model::GPT m(cfg.model, B, T, dev, {zstage < 3, zstage < 2, parse_dtype(cfg.dtype)});
  std::unique_ptr<parallel::Zero> zero;
  if (zstage > 0)
    zero = std::make_unique<parallel::Zero>(world, m.layout(), zstage, m.params(), m.grads(),
                                            static_cast<int>(cfg.zero_prefetch),
                                            parallel::parse_offload(cfg.zero_offload));
  if (zstage >= 2) m.set_store(zero.get());
  const optim::AdamWConfig acfg{cfg.learning_rate, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
  optim::AdamW opt =
      zero ? optim::AdamW(zero->runs(), zero->shard_size(), acfg, dev,
                          zero->offload() != parallel::Offload::None ? MemCategory::Offloaded : MemCategory::OptState)
           : optim::AdamW(m.layout(), acfg, dev);
  TrainState st;
  optim::LossScaler scaler(cfg.loss_scale_config());
  if (resume) {
    if (zero) {
      // Each rank reads the ranges it holds, from a checkpoint of any stage and world size.
      check_checkpoint_layout(ck_meta, m.layout());
      int64_t steps = 0;
      st = checkpoint_state(ck_meta, &steps);
      opt.set_steps_taken(steps);
      for (const auto& p : zero->pieces()) {
        read_checkpoint_range(ck_meta, CkptPart::M, p.flat, p.count, opt.m() + p.local);
        read_checkpoint_range(ck_meta, CkptPart::V, p.flat, p.count, opt.v() + p.local);
        if (zstage == 3)
          read_checkpoint_range(ck_meta, CkptPart::Params, p.flat, p.count, zero->param_base() + p.local);
      }
      if (zstage < 3) read_checkpoint_range(ck_meta, CkptPart::Params, 0, m.flat_size(), m.params());
    } else {
      if (lead) st = load_checkpoint(cfg.out_dir, m, &opt, /*verify=*/false);  // verified above
      // Every rank continues from rank 0's weights, optimizer state and step.
      broadcast_floats(world, opt.m(), opt.size());
      broadcast_floats(world, opt.v(), opt.size());
    }
    broadcast_state(world, st, opt);
    if (st.loss_scale && scaler.dynamic())
      scaler.set_state(*st.loss_scale);  // a dynamic scale goes on where it was
    else if (st.loss_scale)
      log::warn(
          "the checkpoint holds dynamic loss scaling's state (scale {:g}, {} skipped steps), but "
          "train.loss_scale={} does not scale dynamically here: the saved scale is not used",
          st.loss_scale->scale, st.loss_scale->skipped, cfg.loss_scale);
    log::info("resuming from {} at iter {} (best val loss {:.4f})", cfg.out_dir, st.iter, st.best_val_loss);
  } else if (zstage == 3) {
    // Every rank draws the same values group by group and keeps its pieces.
    Array<float> gp(static_cast<size_t>(m.layout().max_group_size()), MemCategory::Other);
    for (int g = 0; g < m.layout().num_groups(); ++g) {
      m.layout().init_group(g, gp.data(), cfg.seed);
      zero->load_group(g, gp.data());
    }
  } else {
    m.init_weights(cfg.seed);
  }
  if (zstage < 3) broadcast_floats(world, m.params(), m.flat_size());  // identical replicas, whatever each rank did
  if (zero) zero->params_changed();  // the master copy (offload) and the windows follow
  m.params_changed();                // and the bf16 compute copy
  // ddp.deterministic: each shard's gradient alone, summed in a fixed order
  // (a single rank may cut its batch into shards to reproduce N ranks).
  std::unique_ptr<parallel::DeterministicGrads> det;
  if (cfg.ddp_deterministic)
    det = std::make_unique<parallel::DeterministicGrads>(world, m.flat_size(), static_cast<int>(B / Bs));
  std::unique_ptr<parallel::DataParallel> ddp;
  if (nranks > 1 && !det && !zero)
    ddp =
        std::make_unique<parallel::DataParallel>(world, m.layout(), m.grads(), parallel::DdpOptions{cfg.ddp_bucket_mb});
  const std::function<void(int)> ddp_hook = ddp ? ddp->hook() : nullptr;
  const optim::LrSchedule sched{cfg.learning_rate, cfg.min_lr, cfg.warmup_iters, cfg.lr_decay_iters, cfg.decay_lr};
  // Peak of the whole job: rank 0's measurement (made while the others wait) times the ranks.
  float peak_rank = 0;
  if (lead)
    peak_rank = static_cast<float>(cfg.peak_flops > 0 ? cfg.peak_flops / nranks
                                   : dev.is_cpu()     ? cpu_gemm_peak_flops(num_threads(), m.bf16_products())
                                                      : gpu_peak_flops(dev.index));
  broadcast_floats(world, &peak_rank, 1);
  const double peak = static_cast<double>(peak_rank) * nranks;
  const int64_t tokens_per_iter = B * T * cfg.gas * nranks;
  const double flops_per_iter = m.flops_per_token(T) * static_cast<double>(tokens_per_iter);

  log::info("parallm train: {} | {} threads", cfg.model.summary(), num_threads());
  log::info("number of parameters: {:.2f}M", static_cast<double>(m.num_params_nanogpt()) / 1e6);
  log::info("world: {} rank{} ({} backend), global batch {} = micro batch {} x {} rank{} x gas {}", nranks,
            nranks > 1 ? "s" : "", world.backend(), B * nranks * cfg.gas, B, nranks, nranks > 1 ? "s" : "", cfg.gas);
  log::info("tokens per iteration will be: {} (global batch {} x block {})", tokens_per_iter, B * nranks * cfg.gas, T);
  if (det)
    log::info("ddp: deterministic, gradients of {} shard{} of {} samples summed in a fixed order (not overlapped)",
              det->shards(), det->shards() > 1 ? "s" : "", Bs);
  if (ddp)
    log::info("ddp: {} gradient buckets of up to {} MiB, all-reduced during backward", ddp->num_buckets(),
              cfg.ddp_bucket_mb);
  if (zero)
    log::info("zero: stage {}, this rank's shard {} of {} elements ({} groups){}", zstage, zero->shard_size(),
              m.flat_size(), m.layout().num_groups(),
              (zstage == 3   ? fmt::format(", parameters gathered per block ({} ahead)", cfg.zero_prefetch)
               : zstage == 2 ? std::string(", gradients reduce-scattered during backward")
                             : std::string()) +
                  (cfg.zero_offload != "none" ? ", offload " + cfg.zero_offload : std::string()));
  if (!dev.is_cpu())
    log::info(
        "device: {} {} | {} | {}", dev.str(), gpu::describe(dev.index), gpu::version(),
        cfg.dtype == "bf16" ? "bf16 mixed precision (fp32 master weights, gradients and optimizer state)" : "fp32");
  else if (m.bf16_products())
    log::info(
        "dtype: bf16 mixed precision on the CPU: bf16 products ({}) with fp32 accumulation; activations, "
        "weights, gradients and optimizer state fp32",
        kernels::bf16_products_impl());
  if (scaler.dynamic())
    log::info(
        "loss scaling: dynamic from {:g} (a step whose gradients overflow is skipped and the scale halves; it "
        "doubles after {} finite steps)",
        scaler.state().scale, cfg.loss_scale_window);
  else if (scaler.active())
    log::info("loss scaling: static {:g}", scaler.state().scale);
  log::info("MFU peak: {:.1f} GFLOP/s ({})", peak / 1e9,
            cfg.peak_flops > 0  ? "train.peak_flops"
            : m.bf16_products() ? "measured bf16 GEMM"
            : dev.is_cpu()      ? "measured fp32 GEMM"
                                : "the GPU's dense bf16 tensor-core peak");

  std::vector<int32_t> x(B * T), y(B * T);
  RunSummary sum;
  sum.first_iter = st.iter;
  // Launchers (mpirun, srun) relay output line by line, often through a pty: no bar there.
  Progress progress(st.iter, cfg.max_iters, cfg.progress && nranks == 1);
  double tok_s_acc = 0;
  int64_t tok_s_n = 0;
  bool memory_reported = false;
  std::vector<float> shard_losses;  // deterministic: each shard's loss, reduced in a fixed order
  shard_losses.reserve(std::max(cfg.gas, cfg.eval_iters) * (B / Bs));

  bool saved_any = resume;  // a checkpoint of this run exists
  // The checkpoint of the state before iteration `next` (collective under ZeRO).
  auto save_state = [&](int64_t next) {
    saved_any = true;
    st.iter = next;
    st.loss_scale.reset();
    if (scaler.dynamic()) st.loss_scale = scaler.state();
    if (zero) {
      // Every rank writes its shard (stages 1-2: its pieces of the replicated parameters).
      Array<float> pp(zstage < 3 ? static_cast<size_t>(zero->shard_size()) : 0, MemCategory::Other);
      if (zstage < 3)
        for (const auto& p : zero->pieces())
          std::copy(m.params() + p.flat, m.params() + p.flat + p.count, pp.data() + p.local);
      save_checkpoint_sharded(world, cfg.out_dir, m.layout(), zstage < 3 ? pp.data() : zero->param_base(), opt.m(),
                              opt.v(), opt.steps_taken(), st, cfg.to_json());
    } else if (lead) {
      save_checkpoint(cfg.out_dir, m, opt, st, cfg.to_json());
    }
    if (lead) progress.print(fmt::format("saved checkpoint to {}/ckpt", cfg.out_dir));
  };
  // A record that could not be written (a full disk) stops the run on every
  // rank after iteration `it`, once the state is saved where space allows.
  auto stop_if_records_lost = [&](int64_t it) {
    const std::string lost = run_dir ? run_dir->write_error() : std::string();
    if (world_all(lost.empty())) return;
    std::string saved = "rank 0 reports whether the state was saved";  // it alone saves, without ZeRO
    try {
      if (run_dir) st.unwritten_records = run_dir->unwritten_metrics();  // written when the run resumes
      save_state(it + 1);
      if (lead || zero) saved = fmt::format("the state after iteration {} is saved in {}/ckpt", it, cfg.out_dir);
    } catch (const Error& e) {
      saved = "saving the state failed too (" + e.message() + ")";
    }
    throw IoError("train",
                  fmt::format("{}; the run stopped after iteration {} instead of training on without its "
                              "records; {}. Free space in {}, then continue with train.init_from=resume",
                              lead ? lost : "rank 0 could not write the run's records", it, saved, cfg.out_dir));
  };
  auto evaluate = [&](int64_t it, float lr) {
    Timer t;
    model::StepContext ectx;  // no dropout, no grads
    float losses[2];
    for (int s = 0; s < 2; ++s) {
      double acc = 0;
      shard_losses.clear();
      for (int64_t k = 0; k < cfg.eval_iters; ++k) {
        loader.get(static_cast<data::Split>(s), k, 0, x.data(), y.data(), /*eval=*/true);
        for (int64_t j = 0; j < B / Bs; ++j) {
          const float l = m.forward(x.data() + j * Bs * T, y.data() + j * Bs * T, Bs, T, ectx);
          if (det)
            shard_losses.push_back(l);
          else
            acc += l;
        }
      }
      losses[s] = det ? det->mean_loss(shard_losses, cfg.eval_iters)
                      : world_mean(static_cast<float>(acc / static_cast<double>(cfg.eval_iters)));
    }
    const double dt = t.seconds();
    progress.print(fmt::format("step {}: train loss {:.4f}, val loss {:.4f} ({:.1f}s)", it, losses[0], losses[1], dt));
    write_metrics({{"kind", "eval"},
                   {"step", it},
                   {"loss", losses[0]},
                   {"lr", lr},
                   {"dt_ms", dt * 1e3},
                   {"dtf_ms", dt * 1e3},
                   {"dtb_ms", 0.0},
                   {"tokens_per_s", 2.0 * cfg.eval_iters * B * T / dt},
                   {"mfu", 0.0},
                   {"train_loss", losses[0]},
                   {"val_loss", losses[1]}});
    sum.last_val_loss = losses[1];
    // The last iteration saves too if nothing was saved yet: every run that trained leaves a checkpoint.
    const bool last_unsaved = it == cfg.max_iters && !saved_any;
    if (losses[1] < st.best_val_loss || cfg.always_save_checkpoint || last_unsaved) {
      st.best_val_loss = std::min<double>(st.best_val_loss, losses[1]);
      if (it > 0 && !cfg.eval_only) save_state(it);  // an eval-only run never rewrites the checkpoint
    }
    // Stage 3 gathers parameters collectively: every rank samples (the same tokens), rank 0 prints.
    if (cfg.sample_tokens > 0 && (lead || zstage == 3)) {
      auto prompt = vocab.encode(prompt_text);
      const auto n_prompt = static_cast<std::ptrdiff_t>(prompt.size());
      auto out = generate(
          m, prompt,
          {cfg.sample_tokens, cfg.temperature, cfg.top_k, cfg.seed + static_cast<uint64_t>(it), vocab.size(), {}});
      if (lead)
        progress.print("sample:\n" + vocab.decode(std::vector<int32_t>(out.begin() + n_prompt, out.end())) + "\n---");
    }
  };

  // One process on the GPU: the GPU is never drained inside the step. The
  // loss of a micro-batch is read once its forward is done (its backward
  // still running), forward and backward are timed by events marking the
  // step's start and each micro-step's forward and backward end, and the
  // first wait for the GPU is the gradient norm's.
  const bool gpu_async = !dev.is_cpu() && !ddp && !det && !zero;
  std::vector<std::unique_ptr<gpu::Event>> marks;
  if (gpu_async)
    for (int64_t k = 0; k < 1 + 2 * cfg.gas; ++k) marks.push_back(std::make_unique<gpu::Event>());
  for (int64_t it = st.iter; it <= cfg.max_iters; ++it) {
    const float lr = sched.at(it);
    // Every eval_interval steps, and at the last iteration (train.final_eval): a run ends evaluated and checkpointed.
    if (it % cfg.eval_interval == 0 || (it == cfg.max_iters && cfg.final_eval) || cfg.eval_only) {
      evaluate(it, lr);
      if (cfg.eval_only) {
        PARALLM_CHECK(!run_dir || run_dir->write_error().empty(), IoError, "train",
                      "{}: the evaluation's record was not written", run_dir->write_error());
        break;
      }
    }
    Timer t_iter;
    double dtf = 0, dtb = 0, loss_acc = 0;
    if (gpu_async) marks.front()->record();
    m.zero_grad();
    if (det) det->begin_step();
    if (zero) zero->begin_step();
    shard_losses.clear();
    for (int64_t micro = 0; micro < cfg.gas; ++micro) {
      {
        PARALLM_PROFILE("data");
        loader.get(data::Split::Train, it, micro, x.data(), y.data());
      }
      for (int64_t j = 0; j < B / Bs; ++j) {  // one pass unless a single rank reproduces several shards
        model::StepContext ctx{true,
                               true,
                               cfg.seed,
                               static_cast<uint64_t>(it * cfg.gas + micro),
                               scaler.scale() / static_cast<float>(cfg.gas),  // exact: S is a power of two
                               nullptr,
                               rank * B + j * Bs};
        // Gradients are averaged across ranks on the last micro-step only.
        if (ddp && micro == cfg.gas - 1) ctx.grads_ready = ddp_hook;
        if (det) m.zero_grad();  // each shard's gradient alone
        const int32_t* xs = x.data() + j * Bs * T;
        ctx.defer_loss = gpu_async;
        Timer tf;
        float l = m.forward(xs, y.data() + j * Bs * T, Bs, T, ctx);
        if (gpu_async) marks[1 + 2 * micro]->record();
        dtf += tf.seconds();
        Timer tb;
        m.backward(xs, Bs, T, ctx);
        if (gpu_async) {
          marks[2 + 2 * micro]->record();
          l = m.deferred_loss();
        } else if (!dev.is_cpu()) {
          gpu::synchronize();  // dtb times the GPU's work, not its queueing
        }
        if (det)
          shard_losses.push_back(l);
        else
          loss_acc += l;
        if (det) det->add_shard(static_cast<int>(j), m.grads());
        dtb += tb.seconds();
      }
      Timer tc;
      if (det) det->end_micro_step(m.grads());
      dtb += tc.seconds();
    }
    Timer to;
    if (ddp) ddp->finish();
    if (det) det->finish(m.grads());
    if (zero) zero->finish_grads();
    if (std::find(fault_inf.begin(), fault_inf.end(), it) != fault_inf.end() && (!zero || zero->shard_size() > 0))
      write_inf(zero ? zero->opt_grads() : m.grads(), zero ? Device::cpu() : dev);
    double norm = zero ? zero->grad_norm() : optim::global_norm(m.grads(), m.flat_size(), dev);
    if (gpu_async) {  // the norm's readback waited for the backward: the marks are done
      dtf = 0;
      for (int64_t k = 0; k < cfg.gas; ++k) dtf += marks[1 + 2 * k]->elapsed_ms_since(*marks[2 * k]) * 1e-3;
    }
    const float loss = det ? det->mean_loss(shard_losses, cfg.gas)
                           : world_mean(static_cast<float>(loss_acc / static_cast<double>(cfg.gas)));
    if (!std::isfinite(loss))
      throw NumericError("train", fmt::format("non-finite loss ({}) at iter {}; lower optimizer.learning_rate or "
                                              "set optimizer.grad_clip",
                                              loss, it));
    // Replicas (DDP, deterministic) each hold their own copy of the global
    // norm: they agree on whether it is finite, so no rank skips alone (ZeRO's
    // norm is one collective sum already).
    if (scaler.dynamic() && !zero && !world_all(std::isfinite(norm))) norm = std::numeric_limits<double>::infinity();
    // The gradients are scaled by S (1 without loss scaling): clipping sees the
    // true norm and AdamW divides by S, both exact for a power of two.
    const float used_scale = scaler.scale();
    const double true_norm = norm / used_scale;
    const bool apply = scaler.update(norm, it);  // every rank decides alike: the norm is global
    if (apply) {
      // AdamW writes the model's bf16 weight copy as it updates the weights (where there is one).
      bfloat16* copy = zero ? nullptr : m.weight_copy_for_step();
      opt.step(zero ? zero->opt_params() : m.params(), zero ? zero->opt_grads() : m.grads(), lr,
               optim::clip_factor(true_norm, cfg.grad_clip) / used_scale, copy);
      if (zero) zero->gather_params();
      if (!copy) m.params_changed();
    } else {
      progress.print(fmt::format("iter {}: gradients overflowed at loss scale {:g}: update skipped, scale now {:g}", it,
                                 used_scale, scaler.state().scale));
    }
    dtb += to.seconds();
    const double dt = t_iter.seconds();
    if (gpu_async) dtb = dt - dtf;  // the GPU's forwards, then everything else: backward and optimizer
    const double tok_s = static_cast<double>(tokens_per_iter) / dt;
    const double mfu = flops_per_iter / dt / peak;
    sum.train_losses.push_back(loss);
    if (it > sum.first_iter) {
      tok_s_acc += tok_s;
      ++tok_s_n;
    }
    nlohmann::json rec{{"kind", "train"},   {"step", it},          {"loss", loss},        {"lr", lr},
                       {"dt_ms", dt * 1e3}, {"dtf_ms", dtf * 1e3}, {"dtb_ms", dtb * 1e3}, {"tokens_per_s", tok_s},
                       {"mfu", mfu}};
    if (apply) rec["grad_norm"] = true_norm;  // a skipped step's norm is not finite
    if (scaler.active()) rec["loss_scale"] = used_scale;
    if (scaler.dynamic()) rec["skipped"] = !apply;
    std::string comm_text;
    if (det && nranks > 1) {
      rec["comm_ms"] = det->comm_seconds() * 1e3;
      rec["comm_exposed_ms"] = det->comm_seconds() * 1e3;
      comm_text = fmt::format(", comm {:.1f}ms (deterministic, not overlapped)", det->comm_seconds() * 1e3);
    }
    if (ddp) {
      const auto& cs = ddp->stats();
      rec["comm_ms"] = cs.comm_s * 1e3;
      rec["comm_exposed_ms"] = cs.exposed_s * 1e3;
      rec["comm_bytes"] = cs.bytes;
      rec["comm_bytes_all_reduce"] = cs.bytes;
      comm_text = fmt::format(", comm {:.1f}ms ({:.0f}% not overlapped)", cs.comm_s * 1e3,
                              cs.comm_s > 0 ? 100.0 * std::min(1.0, cs.exposed_s / cs.comm_s) : 0.0);
    }
    if (zero && nranks > 1) {
      const auto& zs = zero->stats();
      rec["comm_ms"] = zs.comm_s * 1e3;
      rec["comm_exposed_ms"] = zs.exposed_s * 1e3;
      rec["comm_bytes"] = zs.reduce_scatter_bytes + zs.all_gather_bytes + zs.all_reduce_bytes;
      rec["comm_bytes_reduce_scatter"] = zs.reduce_scatter_bytes;
      rec["comm_bytes_all_gather"] = zs.all_gather_bytes;
      comm_text = fmt::format(", comm {:.1f}ms ({:.1f} ms waited), reduce-scatter {} + all-gather {}", zs.comm_s * 1e3,
                              zs.exposed_s * 1e3, format_bytes(static_cast<size_t>(zs.reduce_scatter_bytes)),
                              format_bytes(static_cast<size_t>(zs.all_gather_bytes)));
    }
    write_metrics(rec);
    if (it % cfg.log_interval == 0)
      progress.print(
          fmt::format("iter {}: loss {:.4f}, lr {:.2e}, dt {:.1f}ms, dtf {:.1f}ms, dtb {:.1f}ms, "
                      "tok/s {:.0f}, mfu {:.2f}%{}",
                      it, loss, lr, dt * 1e3, dtf * 1e3, dtb * 1e3, tok_s, mfu * 100,
                      comm_text + (scaler.active() ? fmt::format(", loss scale {:g}", used_scale) : "")));
    progress.update(it, fmt::format("loss {:.4f} tok/s {:.0f}", loss, tok_s));
    if (!memory_reported) {
      memory_reported = true;
      const MemStats ms = HostAllocator::instance().stats();
      progress.print(memory_line(ms));
      progress.print(state_table(ms, m.layout().count()));
      if (zero && zstage == 3)
        progress.print(
            fmt::format("zero: of the parameters, {} ({:.2f} B/param) are the gathered windows (embeddings "
                        "and {} block{}); the shard is {:.2f} B/param",
                        format_bytes(zero->window_bytes()),
                        static_cast<double>(zero->window_bytes()) / static_cast<double>(m.layout().count()),
                        1 + cfg.zero_prefetch, cfg.zero_prefetch > 0 ? "s" : "",
                        static_cast<double>(ms.peak[static_cast<int>(MemCategory::Params)] - zero->window_bytes()) /
                            static_cast<double>(m.layout().count())));
      if (!dev.is_cpu()) progress.print("GPU " + memory_line(gpu::device_stats()));
      nlohmann::json mrec{{"step", it}};
      for (int c = 0; c < static_cast<int>(MemCategory::kCount); ++c)
        mrec[std::string(mem_category_name(static_cast<MemCategory>(c))) + "_bytes"] = ms.peak[c];
      mrec["total_peak_bytes"] = ms.total_peak;
      if (run_dir) run_dir->write_memory(mrec);
    }
    sum.last_iter = it;
    stop_if_records_lost(it);
  }
  if (prof::enabled()) log::info("profile (PARALLM_PROFILE=1):\n{}", prof::table());
  sum.best_val_loss = static_cast<float>(st.best_val_loss);
  sum.loss_scale = scaler.state().scale;
  sum.skipped_steps = scaler.state().skipped;
  sum.mean_tokens_per_s = tok_s_n ? tok_s_acc / static_cast<double>(tok_s_n) : 0;
  return sum;
}

}  // namespace

RunSummary run_training(RunConfig cfg, comm::Communicator* world_in) {
  std::unique_ptr<comm::Communicator> own_world;
  if (!world_in) own_world = comm::make_world("self");
  std::optional<RunDir> run_dir;
  try {
    return train_run(std::move(cfg), world_in ? *world_in : *own_world, run_dir);
  } catch (const std::exception& e) {
    if (run_dir) RunDir::log_error(e.what());  // train.log says how the run ended
    throw;
  }
}

}  // namespace parallm::train
