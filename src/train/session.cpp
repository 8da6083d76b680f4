// Setup of a training run (session.h): the checks come first, in the order a
// user's mistake is cheapest to report (the config alone, then the dataset,
// then the checkpoint, then the device), and nothing is written until every
// rank has passed them.
#include "train/session.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>

#include "comm/hang_record.h"
#include "comm/topology.h"
#include "core/env.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/log.h"
#include "core/text.h"
#include "core/threads.h"
#include "parallel/group_ops.h"
#include "train/checkpoint/ckpt_dirs.h"
#include "train/checkpoint/state_io.h"
#include "train/config/agree.h"
#include "train/config/run_checks.h"
#include "train/records/peak.h"
#include "train/records/run_log.h"

namespace parallm::train {

namespace {

// The loss-spike guard, when a z-score turns it on, with a resumed run's windows.
std::unique_ptr<SpikeGuard> make_guard(const Session& s) {
  const TrainSection& t = s.cfg.train;
  const SpikeGuardConfig c{t.skip_loss_zscore, t.skip_grad_zscore, t.skip_window, t.skip_max_consecutive};
  if (!c.enabled()) return nullptr;
  const nlohmann::json& saved = s.st.spike_guard;
  auto g = std::make_unique<SpikeGuard>(c, saved.is_null() ? SpikeGuardState{} : SpikeGuardState::from_json(saved));
  log::info(
      "loss-spike guard: a step whose {} more than the z-score{} above the mean of the last {} applied steps is "
      "skipped (acting once {} steps are in; {} now); more than {} skipped in a row stop the run",
      c.loss_z > 0 && c.grad_z > 0 ? "loss or gradient norm lies"
      : c.loss_z > 0               ? "loss lies"
                                   : "gradient norm lies",
      c.loss_z > 0 && c.grad_z > 0 ? fmt::format("s {:g} / {:g}", c.loss_z, c.grad_z)
                                   : fmt::format(" {:g}", c.loss_z > 0 ? c.loss_z : c.grad_z),
      c.window, c.window, g->state().loss.size(), c.max_consecutive);
  return g;
}

// Every rank's host (gathered unless the caller knew them) and, with
// several ranks, the straggler report, whose peers are the ranks of one
// pipeline stage. Collective over the world.
void observe_ranks(Session& s) {
  const int n = s.world.size();
  if (static_cast<int>(s.invocation.hosts.size()) != n) {
    s.invocation.hosts.clear();
    for (const comm::RankPlace& p : comm::discover_topology(s.world).ranks) s.invocation.hosts.push_back(p.host);
  }
  if (n == 1) return;
  std::vector<int> stage(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) stage[static_cast<size_t>(r)] = s.mesh->coord_of(r).pp;
  s.straggler = std::make_unique<StragglerReport>(s.world, s.cfg.train.straggler_pct, s.cfg.train.straggler_window,
                                                  std::move(stage), s.invocation.hosts);
}

// The config this run trains with, the same on every rank: a resumed run's
// checkpoint config with this invocation's keys laid over it, checked, with
// the dataset's vocabulary. Returns what a resume changed.
struct ResumeChanges {
  std::string keys;   // "key=new (was old), ...": the keys a resume changed ("" if none)
  LayoutNote layout;  // the layout, when not the checkpoint's
};
ResumeChanges resolve_config(Session& s, int ranks_per_node) {
  RunConfig& cfg = s.cfg;
  ResumeChanges r;
  std::string& changes = r.keys;
  if (s.resume) {
    // The newest intact checkpoint (or train.resume_step's), agreed by every rank.
    ChooseOptions o;
    if (cfg.train.resume_step >= 0) o.at_iter = cfg.train.resume_step;
    s.ck_meta = choose_checkpoint(cfg.train.out_dir, &s.world, o);
    std::vector<std::string> changed;
    const RunConfig asked = cfg;
    cfg = cfg.resumed_from(s.ck_meta["config"], &changed);
    for (const auto& c : changed) changes += (changes.empty() ? "" : ", ") + c;
    r.layout = fit_resumed_layout(cfg, asked, s.ck_meta.value("layout", nlohmann::json()), s.world.size());
  }
  if (!s.lead) cfg.train.progress = false;
  if (cfg.train.init_from == InitFrom::Hf) take_hf_model(cfg);
  check_ranks_agree(cfg, s.world);  // every rank, before any check or decision that could differ between them
  // Every check that needs no file comes before the dataset is read (the
  // vocabulary size, unless given, comes from it).
  if (cfg.vocab_size_set)
    cfg.validate();
  else
    cfg.check_ranges();
  parallel::resolve_mesh_dims(cfg.mesh_dims(), s.world.size(), ranks_per_node, cfg.parallel.tp_across_nodes);
  s.vocab = dataset_vocabulary(cfg, s.resume ? &s.ck_meta["config"] : nullptr);
  if (cfg.train.init_from == InitFrom::Hf) check_hf_vocabulary(cfg, s.vocab);
  cfg.validate();  // train.threads in range before libgomp is asked for them
  if (cfg.train.threads > 0) set_num_threads(static_cast<int>(cfg.train.threads));
  return r;
}

// A resumed run whose checkpoint resumes past train.max_iters: the
// sentence saying so ("" otherwise). No file is touched, except to write the
// records a full disk kept in the checkpoint (a stop at the last steps).
std::string finished_run(const Session& s, int64_t ck_iter, const nlohmann::json& carried) {
  std::string done = nothing_left(s.cfg, ck_iter);
  if (done.empty() || !s.lead || carried.empty()) return done;
  RunDir(s.cfg, RunDir::Mode::Records, ck_iter, carried);
  return done + fmt::format("; the {} metrics records a full disk kept in the checkpoint are now in {}/metrics.jsonl",
                            carried.size(), s.cfg.train.out_dir);
}

// A resumed run's train.skip_batches may change only the batches it has not
// read yet: those before the checkpoint's next batch are its past.
void check_skip_past(const Session& s, int64_t ck_iter) {
  const auto& saved = s.ck_meta["config"];
  const BatchSkip before = BatchSkip::parse("train.skip_batches", saved.value("train.skip_batches", std::string()));
  const BatchSkip& now = s.cfg.train.skip_batches;
  const int64_t next = before.data_index(ck_iter);
  auto has = [](const BatchSkip& b, const std::pair<int64_t, int64_t>& r) {
    return std::find(b.ranges.begin(), b.ranges.end(), r) != b.ranges.end();
  };
  for (const auto& r : now.ranges)
    PARALLM_CHECK(r.first >= next || has(before, r), ConfigError, "config",
                  "train.skip_batches: the range {}:{} starts before batch {}, the one the checkpoint of iteration {} "
                  "reads next: the batches before it are trained on already (roll back further with "
                  "train.resume_step to skip them)",
                  r.first, r.second, next, ck_iter);
  for (const auto& r : before.ranges)
    PARALLM_CHECK(r.first >= next || has(now, r), ConfigError, "config",
                  "train.skip_batches={}: the checkpoint of iteration {} skipped the range {}:{} already (it reads "
                  "batch {} next); keep that range, or the batches after it would move",
                  now.text(), ck_iter, r.first, r.second, next);
}

// The device this rank trains on. Several ranks: NCCL's GPU (one per rank, by
// local rank); with a host-only backend (mpi) the GPU of the local rank (the
// world's placement by host) modulo the GPUs seen, so ranks may share one,
// their device buffers staged through host memory (comm/device_staging.h).
// train.device=cuda:N pins every rank to N. Collective over `world`.
Device choose_device(const TrainSection& t, comm::Communicator& world) {
  Device dev = t.device;
  const std::string name = t.device_by_rank ? "cuda" : dev.str();
  if (dev.is_cpu()) {
    PARALLM_CHECK(world.gpu_device() < 0, ConfigError, "config",
                  "train.device=cpu with comm.backend={}: NCCL moves GPU memory; use comm.backend=mpi for the CPU",
                  world.backend());
    return dev;
  }
  if (world.size() > 1 && world.gpu_device() >= 0) {
    PARALLM_CHECK(t.device_by_rank || dev.index == world.gpu_device(), ConfigError, "config",
                  "train.device={}: this rank's communicator runs on cuda:{} (chosen by local rank); use "
                  "train.device=cuda",
                  name, world.gpu_device());
    dev.index = world.gpu_device();
  } else if (world.size() > 1 && t.device_by_rank) {
    const int local = comm::discover_topology(world).me(world.rank()).local_rank;
    dev.index = local % std::max(1, gpu::device_count());
  }
  PARALLM_CHECK(dev.index < gpu::device_count(), ConfigError, "config",
                "train.device={}: {} GPU{} visible to this process", name, gpu::device_count(),
                gpu::device_count() == 1 ? " is" : "s are");
  gpu::set_device(dev.index);
  return dev;
}

// The data-parallel strategy's options (ddp.*, zero.*), checked against the dp group.
parallel::GradSyncOptions sync_options(const RunConfig& cfg, int dp_size) {
  const ParallelSection& p = cfg.parallel;
  parallel::GradSyncOptions o;
  o.bucket_mb = p.ddp.bucket_mb;
  o.deterministic = p.ddp.deterministic;
  o.shards = p.ddp.shards;
  o.micro_batch = cfg.train.batch_size;
  o.zero_stage = static_cast<int>(p.zero.stage);
  o.zero_prefetch = static_cast<int>(p.zero.prefetch);
  o.offload = p.zero.offload;
  return parallel::resolve_grad_sync(o, dp_size);
}

// The samples' prompt, checked against the vocabulary before anything is written.
std::string sample_prompt(const RunConfig& cfg, const data::Vocab& vocab) {
  const std::string prompt = cfg.train.sample_prompt.empty() ? "\n" : cfg.train.sample_prompt;
  if (cfg.train.sample_tokens > 0) {
    try {
      vocab.encode(prompt);
    } catch (const ConfigError& e) {
      throw ConfigError("config", fmt::format("train.sample_prompt: {}", e.message()));
    }
  }
  return prompt;
}

// Rank 0 takes the run directory's lock (train/records/run_lock.h), unless it holds
// it already; every rank learns whether it could. `existing_only` takes it
// only where train.out_dir exists: a run refused by a later check creates
// nothing, and a new directory is locked before the run creates it.
void lock_run_dir(Session& s, bool existing_only) {
  std::exception_ptr refused;
  if (s.lead && !s.lock && (!existing_only || std::filesystem::exists(s.cfg.train.out_dir))) try {
      std::string command;
      for (const std::string& a : s.invocation.argv) command += (command.empty() ? "" : " ") + a;
      s.lock.emplace(s.cfg.train.out_dir, command);
    } catch (const Error&) {
      refused = std::current_exception();
    }
  if (parallel::GroupAll(s.world)(!refused)) return;
  if (refused) std::rethrow_exception(refused);
  throw ConfigError("config", "rank 0 could not lock train.out_dir (its error says why)");
}

// Rank 0's run directory, opened once every rank may start (rank 0's
// directory decides for a scratch run: it is the one that writes).
void open_run_dir(Session& s, int64_t ck_iter, const nlohmann::json& carried) {
  lock_run_dir(s, /*existing_only=*/false);
  if (!s.resume) {
    const std::string refusal = s.lead ? scratch_refusal(s.cfg) : std::string();
    if (!parallel::GroupAll(s.world)(refusal.empty()))
      throw ConfigError("config", s.lead ? refusal : "rank 0 refused train.out_dir (its error says why)");
  }
  if (!s.lead) return;
  // A rollback: the checkpoints after the one it starts from step aside, so its own are the newest.
  if (s.resume && s.cfg.train.resume_step >= 0 && !s.cfg.train.eval_only) set_aside_newer(s.cfg.train.out_dir, ck_iter);
  using Mode = RunDir::Mode;
  s.run_dir.emplace(s.cfg,
                    !s.resume               ? Mode::Scratch
                    : s.cfg.train.eval_only ? Mode::EvalOnly
                                            : Mode::Resume,
                    ck_iter, carried);
  if (!s.cfg.train.eval_only) s.run_dir->write_repro(repro_record(s));
}

// The model, its gradient sync over the data-parallel group, the optimizer
// over what the sync updates, and the loss scaler.
void build_model(Session& s, const parallel::GradSyncOptions& so) {
  const RunConfig& cfg = s.cfg;
  model::GPTStorage storage = parallel::model_storage(so, cfg.compute_dtype());
  storage.f16_products = cfg.train.dtype == Precision::FP16;  // emulated on the CPU, computed alike on the GPU
  storage.fp8_products = cfg.train.dtype == Precision::FP8;
  storage.fp8_bf16_ends = cfg.train.fp8_bf16_ends;
  storage.fp8_tensorwise = storage.fp8_products && cfg.train.fp8_tensorwise;
  s.model = s.plan->apply_to_model(cfg.model, s.batch(), s.dev, storage,
                                   parallel::PipelineConfig::of(cfg.parallel, cfg.optimizer.gas, cfg.model.n_layer),
                                   s.faults.stop);
  s.sync = parallel::make_grad_sync(s.dp(), *s.model, s.dev, so, &s.mesh->model(),
                                    s.plan->ep_enabled() ? &s.mesh->edp() : nullptr);
  const OptimizerSection& o = cfg.optimizer;
  const optim::AdamWConfig acfg{o.learning_rate, o.beta1, o.beta2, o.eps, o.weight_decay};
  const parallel::UpdateTarget u = s.sync->update();
  s.opt = u.runs ? std::make_unique<optim::AdamW>(*u.runs, u.state_size, acfg, u.device, u.state_category)
                 : std::make_unique<optim::AdamW>(s.model->layout(), acfg, s.dev);
  s.scaler = std::make_unique<optim::LossScaler>(cfg.loss_scale_config());
  s.sched = {o.learning_rate, o.min_lr, o.warmup_iters, o.lr_decay_iters, o.decay_lr};
}

// The job's peak FLOP/s: rank 0's measurement (made while the others wait) times the ranks.
double job_peak(Session& s) {
  const int n = s.world.size();
  float peak_rank = 0;
  if (s.lead) {
    if (s.cfg.train.peak_flops > 0) {
      peak_rank = static_cast<float>(s.cfg.train.peak_flops / n);
    } else if (s.dev.is_cpu()) {
      const CpuPeak p = cpu_gemm_peak(num_threads(), s.model->bf16_products());
      peak_rank = static_cast<float>(p.flops);
      s.peak_measurements = p.measurements;
    } else {
      peak_rank = static_cast<float>(gpu_peak_flops(s.dev.index));
    }
  }
  parallel::broadcast_floats(s.world, &peak_rank, 1);
  return static_cast<double>(peak_rank) * n;
}

}  // namespace

// train.init_from=auto: a resume where train.out_dir holds a checkpoint (rank 0 looks; every rank follows), else
// a run from scratch.
void resolve_auto_init(Session& s) {
  TrainSection& t = s.cfg.train;
  if (t.init_from != InitFrom::Auto) return;
  const bool found = parallel::broadcast_flag(s.world, s.lead && !checkpoint_names(t.out_dir).empty(), 0);
  t.init_from = found ? InitFrom::Resume : InitFrom::Scratch;
  s.resume = t.resume();
  if (s.lead)
    log::info("train.init_from=auto: {}",
              s.resume ? "train.out_dir holds a checkpoint: resuming" : "no checkpoint in train.out_dir: from scratch");
}

std::unique_ptr<Session> open_session(RunConfig cfg, comm::Communicator& world, int ranks_per_node,
                                      std::optional<RunDir>& run_dir, std::string* nothing_to_do,
                                      Invocation invocation) {
  auto s = std::make_unique<Session>(std::move(cfg), world, run_dir);
  s->lead = world.rank() == 0;
  s->resume = s->cfg.train.resume();
  *nothing_to_do = kill_switch_at_start(s->cfg.train, world);
  if (!nothing_to_do->empty()) return nullptr;
  s->invocation = std::move(invocation);
  // A hang is recorded in the run's directory, where an operator looks first (comm/hang_record.h).
  std::error_code ec;
  comm::set_hang_record_path((std::filesystem::absolute(s->cfg.train.out_dir, ec).lexically_normal() /
                              fmt::format("hang-{}-{}.json", comm::this_host(), world.rank()))
                                 .string());
  lock_run_dir(*s, /*existing_only=*/true);  // before a checkpoint is read: one run at a time in train.out_dir
  resolve_auto_init(*s);
  s->faults = Faults::from_env(world.rank());  // before anything is written
  const ResumeChanges changes = resolve_config(*s, ranks_per_node);
  s->control = std::make_unique<RunControl>(s->cfg, world);  // the time limit, before anything is written
  s->faults.check(s->cfg);
  // Where a resumed run starts, and the records a stop on a full disk kept in its checkpoint.
  const int64_t ck_iter = s->resume ? checkpoint_state(s->ck_meta, nullptr).iter : 0;
  const nlohmann::json carried =
      s->resume ? s->ck_meta.value("unwritten_records", nlohmann::json::array()) : nlohmann::json::array();
  if (s->resume) {
    *nothing_to_do = finished_run(*s, ck_iter, carried);
    if (!nothing_to_do->empty()) return nullptr;
    check_skip_past(*s, ck_iter);
  }
  s->dev = choose_device(s->cfg.train, world);
  s->mesh =
      std::make_unique<parallel::Mesh>(world, s->cfg.mesh_dims(), ranks_per_node, s->cfg.parallel.tp_across_nodes);
  s->plan = std::make_unique<parallel::ParallelPlan>(*s->mesh, s->cfg.parallel);
  // This rank's samples (its dp rank's) and positions of them (context parallel).
  const data::BatchSpec spec{s->batch(), s->seq(), s->data_ranks(), s->mesh->coord().dp, s->plan->positions(s->seq())};
  s->loader = std::make_unique<data::Loader>(s->cfg.data.dir, s->cfg.model.vocab_size, spec, s->cfg.train.seed);
  s->prompt = sample_prompt(s->cfg, s->vocab);
  const parallel::GradSyncOptions so = sync_options(s->cfg, s->dp().size());
  observe_ranks(*s);
  open_run_dir(*s, ck_iter, carried);
  if (!changes.keys.empty()) log::info("resume: the checkpoint's settings, except {}", changes.keys);
  if (!changes.layout.text.empty() && s->lead) {
    if (changes.layout.warn)
      log::warn("{}", changes.layout.text);
    else
      log::info("{}", changes.layout.text);
  }
  build_model(*s, so);
  if (s->cfg.train.detect_anomaly)
    s->watch = std::make_unique<model::NumericWatch>(s->dev, world.rank(), s->cfg.optimizer.gas);
  if (s->cfg.train.check_replicas > 0)
    s->replicas = std::make_unique<ReplicaCheck>(*s->mesh, s->dp(), s->cfg.train.check_replicas,
                                                 s->sync->held().param_shard == nullptr);
  if (s->resume)
    restore_state(*s);
  else if (s->cfg.train.init_from == InitFrom::Hf)
    load_hf_weights(*s);
  else
    s->sync->init_params(s->cfg.train.seed);
  s->st.layout = layout_record(s->cfg, s->mesh->dims());  // saved with every checkpoint
  s->guard = make_guard(*s);
  s->peak = job_peak(*s);
  s->tokens_per_iter = s->batch() * s->seq() * s->cfg.optimizer.gas * s->data_ranks();
  s->losses.reserve(std::max(s->cfg.optimizer.gas, s->cfg.train.eval_iters) * s->sync->passes());
  s->flops_per_iter = s->model->flops_per_token(s->seq()) * static_cast<double>(s->tokens_per_iter);
  log_run(*s);
  // Launchers (mpirun, srun) relay output line by line, often through a pty: no bar there.
  s->progress =
      std::make_unique<Progress>(s->st.iter, s->cfg.train.max_iters, s->cfg.train.progress && world.size() == 1);
  return s;
}

}  // namespace parallm::train
