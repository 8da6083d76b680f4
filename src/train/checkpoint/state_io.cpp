#include "train/checkpoint/state_io.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/gpu.h"
#include "core/log.h"
#include "core/timer.h"
#include "hf/hf_model.h"
#include "parallel/group_ops.h"
#include "train/checkpoint/ckpt_dirs.h"

namespace parallm::train {

namespace {

// Rank 0's values of the few scalars a resumed run continues from.
void broadcast_scalars(comm::Communicator& g, TrainState& st, optim::AdamW& opt) {
  if (g.size() == 1) return;
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
  g.broadcast(t, 0);
  g.broadcast(it, 0);
  st.best_val_loss = t.data<float>()[0];
  st.iter = it.data<int32_t>()[0];
  opt.set_steps_taken(it.data<int32_t>()[1]);
  st.loss_scale.reset();
  if (it.data<int32_t>()[2])
    st.loss_scale = optim::LossScaleState{t.data<float>()[1], it.data<int32_t>()[3], it.data<int32_t>()[4]};
}

// Rank 0's loss-spike guard state (its JSON text, sent as int32 words; none: length 0).
void broadcast_guard_state(comm::Communicator& g, TrainState& st) {
  if (g.size() == 1) return;
  const std::string text = g.rank() == 0 && !st.spike_guard.is_null() ? st.spike_guard.dump() : std::string();
  Tensor len = Tensor::empty({1}, DType::I32);
  len.data<int32_t>()[0] = static_cast<int32_t>(text.size());
  g.broadcast(len, 0);
  const int32_t n = len.data<int32_t>()[0];
  st.spike_guard = nullptr;
  if (n == 0) return;
  Tensor words = Tensor::empty({(n + 3) / 4}, DType::I32);
  std::memset(words.raw(), 0, static_cast<size_t>(words.numel()) * 4);
  if (g.rank() == 0) std::memcpy(words.raw(), text.data(), text.size());
  g.broadcast(words, 0);
  st.spike_guard = nlohmann::json::parse(std::string(static_cast<const char*>(words.raw()), static_cast<size_t>(n)));
}

// A buffer of `n` floats on `dev` as host memory: itself on the CPU, else `host` (resized) with, where
// `copy`, the device's values.
float* host_floats(float* p, Device dev, int64_t n, std::vector<float>& host, bool copy) {
  if (dev.is_cpu()) return p;
  host.resize(static_cast<size_t>(n));
  if (copy) gpu::memcpy_d2h(host.data(), p, host.size() * sizeof(float));
  return host.data();
}

// Each rank reads the ranges it holds (a tensor-parallel rank: its part of
// them, from the whole model the checkpoint holds); on a GPU through host copies.
void read_sharded(Session& s, const parallel::HeldState& h) {
  const model::ParamLayout& layout = s.model->layout();
  const model::ParamLayout whole(s.cfg.model);
  check_checkpoint_layout(s.ck_meta, whole);
  int64_t steps = 0;
  s.st = checkpoint_state(s.ck_meta, &steps);
  s.opt->set_steps_taken(steps);
  auto read = [&](CkptPart part, int64_t begin, int64_t count, float* out) {
    read_checkpoint_part(s.ck_meta, part, layout, whole, begin, count, out);
  };
  std::vector<float> hm, hv, hp;
  const Device od = s.opt->device();
  float* m = host_floats(s.opt->m(), od, s.opt->size(), hm, false);
  float* v = host_floats(s.opt->v(), od, s.opt->size(), hv, false);
  for (const auto& p : h.pieces) {
    read(CkptPart::M, p.flat, p.count, m + p.local);
    read(CkptPart::V, p.flat, p.count, v + p.local);
    if (h.param_shard) read(CkptPart::Params, p.flat, p.count, h.param_shard + p.local);
  }
  if (!od.is_cpu()) {
    gpu::memcpy_h2d(s.opt->m(), m, hm.size() * sizeof(float));
    gpu::memcpy_h2d(s.opt->v(), v, hv.size() * sizeof(float));
  }
  if (h.param_shard) return s.sync->from_host();
  float* params = host_floats(s.model->params(), s.model->device(), s.model->flat_size(), hp, false);
  read(CkptPart::Params, 0, s.model->flat_size(), params);
  if (!s.model->device().is_cpu()) s.model->load_params(params);
}

// This rank's state as host floats for its checkpoint share: a GPU's staged
// through `host` (checkpoint.h; sharded: the optimizer's shard and, at stages
// 1-2, the model's parameters, with the stage-3 shard's own host copy refreshed).
parallel::StateBuffers share_buffers(Session& s, std::vector<float>& host) {
  if (!s.sync->held().sharded) return host_state(*s.model, *s.opt, host);
  s.sync->to_host();
  const Device od = s.opt->device(), md = s.model->device();
  const int64_t n = s.opt->size(), np = s.model->params() ? s.model->flat_size() : 0;
  if (od.is_cpu() && md.is_cpu()) return {s.model->params(), s.opt->m(), s.opt->v()};
  const int64_t nm = od.is_cpu() ? 0 : n;  // offloaded, the moments are host memory already
  host.resize(static_cast<size_t>(2 * nm + np));
  float* m = od.is_cpu() ? s.opt->m() : host.data();
  float* v = od.is_cpu() ? s.opt->v() : host.data() + n;
  if (!od.is_cpu()) {
    gpu::memcpy_d2h(m, s.opt->m(), static_cast<size_t>(n) * sizeof(float));
    gpu::memcpy_d2h(v, s.opt->v(), static_cast<size_t>(n) * sizeof(float));
  }
  float* p = np == 0 ? nullptr : md.is_cpu() ? s.model->params() : host.data() + 2 * nm;
  if (np > 0 && !md.is_cpu()) s.model->store_params(p);
  return {p, m, v};
}

// A dynamic scale goes on where it was.
void restore_loss_scale(Session& s) {
  const auto& saved = s.st.loss_scale;
  if (!saved) return;
  if (s.scaler->dynamic()) {
    s.scaler->set_state(*saved);
    return;
  }
  log::warn(
      "the checkpoint holds dynamic loss scaling's state (scale {:g}, {} skipped steps), but "
      "train.loss_scale={} does not scale dynamically here: the saved scale is not used",
      saved->scale, saved->skipped, s.cfg.to_json()["train.loss_scale"].get<std::string>());
}

}  // namespace

void restore_state(Session& s) {
  const parallel::HeldState h = s.sync->held();
  comm::Communicator& dp = s.dp();
  if (h.sharded) {
    read_sharded(s, h);
  } else {
    // The group's rank 0 reads (verified above; a tensor-parallel rank its
    // part of the whole model); the group follows it.
    if (s.sync->reads_checkpoint())
      s.st = load_checkpoint(checkpoint_of(s.ck_meta), *s.model, s.opt.get(), /*verify=*/false);
    // Every rank continues from the first replica's weights (params_loaded), optimizer state and step.
    s.sync->spread(s.opt->m());
    s.sync->spread(s.opt->v());
  }
  broadcast_scalars(dp, s.st, *s.opt);
  broadcast_guard_state(dp, s.st);
  restore_loss_scale(s);
  log::info("resuming from {} at iter {} (best val loss {:.4f})", s.ck_meta["_dir"].get<std::string>(), s.st.iter,
            s.st.best_val_loss);
  s.sync->params_loaded();
  s.saved_any = true;
}

void load_hf_weights(Session& s) {
  const std::vector<float> local = hf::load_hf(s.cfg.train.hf_dir, s.cfg.model, s.model->layout());
  const parallel::HeldState h = s.sync->held();
  if (h.param_shard) {
    for (const auto& p : h.pieces) std::copy_n(local.data() + p.flat, p.count, h.param_shard + p.local);
    s.sync->from_host();
  } else {
    s.model->load_params(local.data());
  }
  log::info("weights from {} (Hugging Face {}, {})", s.cfg.train.hf_dir, model::arch_name(s.cfg.model.arch),
            s.cfg.model.summary());
  s.sync->params_loaded();
}

// train.async_save: a staged save and the thread writing it (joined on
// destruction: a run that ends by an error leaves its <name>.tmp, never a
// half-written checkpoint in place).
struct PendingSave {
  StagedCheckpoint c;
  SaveSlot slot = SaveSlot::Best;
  double stall_s = 0;  // what the step waited: the staging copy
  std::atomic<bool> written{false};
  std::thread writer;
  ~PendingSave() {
    if (writer.joinable()) writer.join();
  }
};

namespace {
void announce(Session& s, const std::string& dir, SaveSlot slot, const std::string& how) {
  if (!s.lead) return;
  s.progress->print(fmt::format("saved checkpoint to {} {}", dir, how));
  // Only once this save stands (the swap is done) are the older ones dropped.
  if (slot == SaveSlot::Step) prune_step_checkpoints(s.cfg.train.out_dir, s.cfg.train.keep_checkpoints);
}
}  // namespace

namespace {
// What this rank contributes to a checkpoint of the whole layout `whole` (the plan says which runs); `host`
// stages a GPU's state.
parallel::CheckpointShare share_of(Session& s, const model::ParamLayout& whole, std::vector<float>& host) {
  auto mine = [&s, &host] { return share_buffers(s, host); };
  return s.plan->checkpoint_share(s.model->layout(), whole, mine, *s.sync);
}
}  // namespace

void prepare_background_saves(Session& s) {
  if (!s.cfg.train.async_save || s.cfg.train.eval_only) return;
  std::vector<float> host;
  s.staging = staging_for(share_of(s, model::ParamLayout(s.cfg.model), host));
}

void settle_saves(Session& s, bool wait) {
  if (!s.pending_save) return;
  PendingSave& p = *s.pending_save;
  if (!wait && s.world.size() > 1) {
    Tensor t = Tensor::empty({1}, DType::I32);
    t.data<int32_t>()[0] = p.written.load() ? 1 : 0;
    s.world.all_reduce(t, comm::ReduceOp::Min);
    if (t.data<int32_t>()[0] == 0) return;
  } else if (!wait && !p.written.load()) {
    return;
  }
  p.writer.join();
  const std::shared_ptr<PendingSave> done = std::move(s.pending_save);
  s.staging = take_buffers(done->c);  // kept for the next save, whatever this one's outcome
  finish_staged(s.world, done->c);    // an IoError on every rank if any rank's write failed
  announce(s, done->c.dir.path(), done->slot,
           fmt::format("(written in the background; training waited {:.3f} s for its copy)", done->stall_s));
}

std::string save_state(Session& s, int64_t next, SaveSlot slot, bool background) {
  settle_saves(s, true);
  s.saved_any = true;
  s.st.iter = next;
  s.st.loss_scale.reset();
  if (s.scaler->dynamic()) s.st.loss_scale = s.scaler->state();
  s.st.spike_guard = s.guard ? s.guard->state().to_json() : nlohmann::json();
  const std::string& out = s.cfg.train.out_dir;
  const CkptDir dir = slot == SaveSlot::Step ? step_checkpoint(out, next) : CkptDir(out);
  // Every layout contributes runs of the whole tensors (the plan says which); one writer writes them.
  const model::ParamLayout whole(s.cfg.model);
  Timer took;
  std::vector<float> host;
  const parallel::CheckpointShare share = share_of(s, whole, host);
  if (background && s.cfg.train.async_save) {
    auto p = std::make_shared<PendingSave>();
    p->c =
        stage_checkpoint(s.world, dir, whole, share, s.opt->steps_taken(), s.st, s.cfg.to_json(), std::move(s.staging));
    p->slot = slot;
    p->stall_s = took.seconds();
    PendingSave* raw = p.get();
    p->writer = std::thread([raw] {
      write_staged(raw->c);
      raw->written.store(true);
    });
    s.pending_save = std::move(p);
    return dir.path();
  }
  write_checkpoint(s.world, dir, whole, share, s.opt->steps_taken(), s.st, s.cfg.to_json());
  announce(s, dir.path(), slot, fmt::format("in {:.3f} s", took.seconds()));
  return dir.path();
}

}  // namespace parallm::train
