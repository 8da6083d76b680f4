#include "train/state_io.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/log.h"
#include "hf/hf_gpt2.h"
#include "parallel/group_ops.h"
#include "parallel/tensor_parallel.h"
#include "parallel/whole_model.h"
#include "train/ckpt_dirs.h"

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

// Each rank reads the ranges it holds (a tensor-parallel rank: its part of
// them, from the whole model the checkpoint holds).
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
  for (const auto& p : h.pieces) {
    read(CkptPart::M, p.flat, p.count, s.opt->m() + p.local);
    read(CkptPart::V, p.flat, p.count, s.opt->v() + p.local);
    if (h.param_shard) read(CkptPart::Params, p.flat, p.count, h.param_shard + p.local);
  }
  if (!h.param_shard) read(CkptPart::Params, 0, s.model->flat_size(), s.model->params());
}

// Sharded state with tensor parallelism, saved in the whole layout group by
// group: each part's pieces of group g are gathered on the dp group's rank
// g % dp (the parameters at stages 1-2 are there already), whose tp group
// assembles the whole group on its tp rank 0, the writer of that group.
void save_sharded_whole(Session& s, const parallel::HeldState& h, const CkptDir& dir) {
  comm::Communicator &dp = s.dp(), &tp = s.mesh->tp();
  const model::ParamLayout& layout = s.model->layout();
  const model::ParamLayout whole(s.cfg.model);
  std::vector<float> group(static_cast<size_t>(layout.max_group_size()));
  auto assemble = [&](CkptPart part, int g, float* out) {
    const int root = g % dp.size();
    const bool here = dp.rank() == root;
    const float* mine = group.data();
    if (part == CkptPart::Params && !h.param_shard) {
      mine = s.model->params() + layout.group(g).begin;
    } else {
      const float* shard = part == CkptPart::M ? s.opt->m() : part == CkptPart::V ? s.opt->v() : h.param_shard;
      s.sync->gather_group(shard, g, here ? group.data() : nullptr, root);
    }
    if (here) parallel::gather_whole_group(tp, layout, whole, g, mine, out);
  };
  save_checkpoint_groups(s.world, tp.rank() == 0 ? dp.rank() : -1, dp.size(), dir, whole, assemble,
                         s.opt->steps_taken(), s.st, s.cfg.to_json());
}

// A pipeline stage's state, saved whole: the ranks holding one whole model
// between them (tp x pp) gather it on their rank 0 (world rank 0). Sharded
// optimizer state (ZeRO-1) is first gathered whole on the stage's dp rank 0,
// group by group.
void save_pipeline(Session& s, const parallel::HeldState& h, const CkptDir& dir) {
  comm::Communicator& dp = s.dp();
  const model::ParamLayout& layout = s.model->layout();
  const float *om = s.opt->m(), *ov = s.opt->v();
  std::vector<float> wm, wv;
  if (h.sharded) {
    const bool root = dp.rank() == 0;
    wm.assign(root ? static_cast<size_t>(layout.total()) : 0, 0.0f);
    wv.assign(wm.size(), 0.0f);
    for (int g = 0; g < layout.num_groups(); ++g) {
      const int64_t at = layout.group(g).begin;
      s.sync->gather_group(s.opt->m(), g, root ? wm.data() + at : nullptr, 0);
      s.sync->gather_group(s.opt->v(), g, root ? wv.data() + at : nullptr, 0);
    }
    om = wm.data();
    ov = wv.data();
  }
  if (dp.rank() != 0) return;
  if (h.sharded || s.dev.is_cpu()) {
    save_checkpoint_whole(s.mesh->tp_pp(), dir, layout, s.cfg.model, s.model->params(), om, ov, s.opt->steps_taken(),
                          s.st, s.cfg.to_json());
    return;
  }
  save_checkpoint(dir, *s.model, *s.opt, s.st, s.cfg.to_json(), &s.mesh->tp_pp());
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
    if (dp.rank() == 0) s.st = load_checkpoint(checkpoint_of(s.ck_meta), *s.model, s.opt.get(), /*verify=*/false);
    // Every rank continues from rank 0's weights (params_loaded), optimizer state and step.
    parallel::broadcast_floats(dp, s.opt->m(), s.opt->size());
    parallel::broadcast_floats(dp, s.opt->v(), s.opt->size());
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
  const std::vector<float> local = hf::load_hf_gpt2(s.cfg.train.hf_dir, s.cfg.model, s.model->layout());
  const parallel::HeldState h = s.sync->held();
  if (h.param_shard) {
    for (const auto& p : h.pieces) std::copy_n(local.data() + p.flat, p.count, h.param_shard + p.local);
  } else {
    s.model->load_params(local.data());
  }
  log::info("weights from {} (Hugging Face GPT-2, {})", s.cfg.train.hf_dir, s.cfg.model.summary());
  s.sync->params_loaded();
}

bool saves_state(const Session& s) {
  return s.lead || s.sync->held().sharded;
}

std::string save_state(Session& s, int64_t next, SaveSlot slot) {
  s.saved_any = true;
  s.st.iter = next;
  s.st.loss_scale.reset();
  if (s.scaler->dynamic()) s.st.loss_scale = s.scaler->state();
  s.st.spike_guard = s.guard ? s.guard->state().to_json() : nlohmann::json();
  const std::string& out = s.cfg.train.out_dir;
  const CkptDir dir = slot == SaveSlot::Step ? step_checkpoint(out, next) : CkptDir(out);
  const parallel::HeldState h = s.sync->held();
  if (s.plan->pp_enabled()) {
    save_pipeline(s, h, dir);
  } else if (h.sharded && s.mesh->tp().size() > 1) {
    save_sharded_whole(s, h, dir);
  } else if (h.sharded) {
    // Every rank writes its shard (stages 1-2: its pieces of the replicated parameters).
    Array<float> scratch;
    const float* params = s.sync->params_to_save(scratch);
    save_checkpoint_sharded(s.dp(), dir, s.model->layout(), params, s.opt->m(), s.opt->v(), s.opt->steps_taken(), s.st,
                            s.cfg.to_json());
  } else if (s.dp().rank() == 0) {  // rank 0 writes; a tensor-parallel model's group gathers it there first
    save_checkpoint(dir, *s.model, *s.opt, s.st, s.cfg.to_json(), &s.mesh->tp());
  }
  if (s.lead) {
    s.progress->print(fmt::format("saved checkpoint to {}", dir.path()));
    // Only once this save stands (the swap is done) are the older ones dropped.
    if (slot == SaveSlot::Step) prune_step_checkpoints(out, s.cfg.train.keep_checkpoints);
  }
  return dir.path();
}

}  // namespace parallm::train
