#include "train/loop/step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/gpu.h"
#include "core/log.h"
#include "core/profiler.h"
#include "core/timer.h"
#include "kernels/fp8.h"

namespace parallm::train {

namespace {

// optimizer.gas micro-batches in order; each is cut into the sync's passes
// (one, unless a single rank reproduces several deterministic shards).
// One process on the GPU: the GPU is never drained inside the step. The loss
// of a micro-batch is read once its forward is done (its backward still
// running), forward and backward are timed by events marking the step's
// start and each micro-step's forward and backward end, and the first wait
// for the GPU is the gradient norm's.
class MicroBatches : public Schedule {
 public:
  explicit MicroBatches(Session& s)
      : s_(s),
        x_(s.batch() * s.local_seq()),
        y_(s.batch() * s.local_seq()),
        gpu_async_(!s.dev.is_cpu() && !s.sync->communicates()) {
    if (gpu_async_)
      for (int64_t k = 0; k < 1 + 2 * s.cfg.optimizer.gas; ++k) marks_.push_back(std::make_unique<gpu::Event>());
    if (s.cfg.train.cuda_graphs) graphs_ = use_graphs();
  }

  PassTimes run(int64_t it, std::vector<float>& losses) override {
    model::GPT& m = *s_.model;
    parallel::GradSync& sync = *s_.sync;
    const int64_t gas = s_.cfg.optimizer.gas, T = s_.local_seq(), passes = sync.passes(), Bs = s_.batch() / passes;
    const int64_t batch = s_.cfg.train.skip_batches.data_index(it);  // the global batch (train.skip_batches)
    PassTimes t;
    if (gpu_async_) marks_.front()->record();
    m.zero_grad();
    sync.begin_step();
    losses.clear();
    for (int64_t micro = 0; micro < gas; ++micro) {
      {
        PARALLM_PROFILE("data");
        s_.loader->get(data::Split::Train, batch, micro, x_.data(), y_.data());
      }
      for (int64_t j = 0; j < passes; ++j) {
        model::StepContext ctx{true,
                               true,
                               s_.cfg.train.seed,
                               static_cast<uint64_t>(it * gas + micro),
                               s_.scaler->scale() / static_cast<float>(gas),  // exact: S is a power of two
                               nullptr,
                               s_.mesh->coord().dp * s_.batch() + j * Bs};
        ctx.grads_ready = sync.before_pass(static_cast<int>(micro), static_cast<int>(gas), static_cast<int>(j));
        ctx.defer_loss = gpu_async_;
        ctx.watch = s_.watch.get();
        ctx.graphs = graphs_;
        const int32_t* xs = x_.data() + j * Bs * T;
        Timer tf;
        float l = m.forward(xs, y_.data() + j * Bs * T, Bs, T, ctx);
        if (gpu_async_) marks_[1 + 2 * micro]->record();
        const double forward_s = tf.seconds();
        t.dtf += forward_s;
        Timer tb;
        m.backward(xs, Bs, T, ctx);
        if (gpu_async_) {
          marks_[2 + 2 * micro]->record();
          l = m.deferred_loss();
        } else if (!s_.dev.is_cpu()) {
          gpu::synchronize();  // dtb times the GPU's work, not its queueing
        }
        losses.push_back(l);
        t.compute += forward_s + tb.seconds();
        sync.after_pass(static_cast<int>(j));
        t.dtb += tb.seconds();
      }
      Timer tc;
      sync.after_micro_step();
      t.dtb += tc.seconds();
    }
    return t;
  }

  void settle(PassTimes& t) override {
    if (!gpu_async_) return;
    t.dtf = 0;  // the norm's readback waited for the backward: the marks are done
    for (int64_t k = 0; k < s_.cfg.optimizer.gas; ++k)
      t.dtf += marks_[1 + 2 * k]->elapsed_ms_since(*marks_[2 * k]) * 1e-3;
    t.device_timed = true;
  }

 private:
  Session& s_;
  std::vector<int32_t> x_, y_;
  bool gpu_async_;
  bool graphs_ = false;  // train.cuda_graphs, where the run allows them
  std::vector<std::unique_ptr<gpu::Event>> marks_;

  // train.cuda_graphs: a lone GPU process whose passes have no host work inside (the model says which).
  bool use_graphs() {
    std::string why = s_.dev.is_cpu() ? "train.device is the CPU"
                      : !gpu_async_   ? "the gradients are communicated during backward (several ranks)"
                      : s_.watch      ? "train.detect_anomaly reads every layer's tensors on the host"
                                      : s_.model->use_cuda_graphs();
    if (!why.empty()) {
      log::warn("train.cuda_graphs=true, but the passes run eagerly: {}", why);
      return false;
    }
    log::info(
        "CUDA graphs: each micro-batch's forward and backward captured at their second run and replayed "
        "(train.cuda_graphs)");
    return true;
  }
};

// Pipeline parallel: the step's micro-batches through this rank's stage, as
// its schedule's actions say (Pipeline::train_step, parallel/pipeline_runtime.h),
// fed from the loader (the stages at the ends read the batches).
class PipelineSteps : public Schedule {
 public:
  explicit PipelineSteps(Session& s) : s_(s) {}

  PassTimes run(int64_t it, std::vector<float>& losses) override {
    parallel::Pipeline::StepFeed f;
    f.it = it;
    f.B = s_.batch();
    f.T = s_.local_seq();
    f.gas = s_.cfg.optimizer.gas;
    const int64_t batch = s_.cfg.train.skip_batches.data_index(it);  // the global batch (train.skip_batches)
    f.read = [&](int64_t micro, int32_t* x, int32_t* y) { s_.loader->get(data::Split::Train, batch, micro, x, y); };
    f.context = [&](int64_t k) {
      model::StepContext c{true,
                           true,
                           s_.cfg.train.seed,
                           static_cast<uint64_t>(it * f.gas + k),
                           s_.scaler->scale() / static_cast<float>(f.gas),  // exact: S is a power of two
                           nullptr,
                           s_.mesh->coord().dp * f.B};
      c.watch = s_.watch.get();
      return c;
    };
    parallel::Pipeline::StepTimes st = s_.plan->pipeline()->train_step(*s_.model, *s_.sync, f, losses);
    PassTimes t;
    t.dtf = st.forward;
    t.dtb = st.backward;
    t.compute = st.compute;
    t.stage_idle = std::move(st.stage_idle);
    t.stage_cost_ms = std::move(st.stage_cost_ms);
    return t;
  }

  void after_update() override { s_.plan->pipeline()->tied_params_from_first(*s_.model); }

 private:
  Session& s_;
};

// The spike guard's verdict on this step ("" to apply it). Its inputs are
// world rank 0's loss and norm, broadcast (one 12-byte message a step): every
// rank computes them alike already (a global mean, a norm summed in a fixed
// order), and this makes it certain, so every rank skips the same steps and
// holds the same windows.
std::string guard_verdict(Session& s, int64_t it, const StepResult& r) {
  PARALLM_PROFILE("spike_guard");  // its cost: bench/spike_guard_cost.sh
  float loss = r.loss;
  double norm = r.norm;
  if (s.world.size() > 1) {
    Tensor t = Tensor::empty({3}, DType::I32);
    std::memcpy(t.raw(), &norm, sizeof norm);
    std::memcpy(t.data<int32_t>() + 2, &loss, sizeof loss);
    s.world.broadcast(t, 0);
    std::memcpy(&norm, t.raw(), sizeof norm);
    std::memcpy(&loss, t.data<int32_t>() + 2, sizeof loss);
  }
  return s.guard->judge(it, loss, norm);
}

// The update itself, when the loss scaler and the spike guard allow it. The gradients are
// scaled by S (1 without loss scaling): clipping sees the true norm and
// AdamW divides by S, both exact for a power of two.
void update(Session& s, int64_t it, float lr, double norm, StepResult& r) {
  r.scale = s.scaler->scale();
  r.norm = norm / r.scale;
  r.applied = s.scaler->update(norm, it);  // every rank decides alike: the norm is global
  if (!r.applied) {
    r.skip_reason = fmt::format("gradients overflowed at loss scale {:g}", r.scale);
    s.progress->print(
        fmt::format("iter {}: {}: update skipped, scale now {:g}", it, r.skip_reason, s.scaler->state().scale));
    return;
  }
  if (s.guard) r.skip_reason = guard_verdict(s, it, r);
  if (!r.skip_reason.empty()) {
    r.applied = false;
    s.progress->print(fmt::format("iter {}: loss spike ({}; loss {:.4f}, grad norm {:.4g}): update skipped", it,
                                  r.skip_reason, r.loss, r.norm));
    return;
  }
  // AdamW writes the model's bf16 weight copy as it updates the weights (where there is one).
  const parallel::UpdateTarget u = s.sync->update();
  s.opt->step(u.params, u.grads, lr, optim::clip_factor(r.norm, s.cfg.optimizer.grad_clip) / r.scale, u.weight_copy);
  s.sync->updated(u.weight_copy != nullptr);
  s.model->balance_expert_bias();  // model.moe_bias_update_rate (nothing otherwise)
}

}  // namespace

std::unique_ptr<Schedule> make_schedule(Session& s) {
  if (s.plan->pp_enabled()) {
    if (s.cfg.train.cuda_graphs)
      log::warn(
          "train.cuda_graphs=true, but the passes run eagerly: a pipeline stage's passes exchange activations "
          "through the host");
    return std::make_unique<PipelineSteps>(s);
  }
  return std::make_unique<MicroBatches>(s);
}

StepResult optimizer_step(Session& s, Schedule& schedule, int64_t it, float lr) {
  std::vector<float>& losses = s.losses;
  Timer t_iter;
  const double slept = s.faults.before_passes(*s.model, it);
  PassTimes t;
  {
    const kernels::Fp8TensorwiseScope fp8(s.plan->fp8_tensorwise());  // the training passes only
    t = schedule.run(it, losses);
  }
  Timer to;
  s.sync->finish_step();
  s.faults.after_sync(*s.sync, s.model->layout(), it);
  const double norm = s.sync->grad_norm(s.scaler->dynamic());
  schedule.settle(t);
  StepResult r;
  r.loss = s.faults.loss(s.sync->mean_loss(losses, s.cfg.optimizer.gas), it);
  if (!std::isfinite(r.loss))
    throw NumericError("train", fmt::format("non-finite loss ({}) at iter {}; lower optimizer.learning_rate or set "
                                            "optimizer.grad_clip",
                                            r.loss, it));
  update(s, it, lr, norm, r);
  schedule.after_update();
  if (s.replicas) s.replicas->after_update(*s.model, it);
  r.dtf = t.dtf;
  r.dtb = t.dtb + to.seconds();
  r.stage_idle = std::move(t.stage_idle);
  r.stage_cost_ms = std::move(t.stage_cost_ms);
  r.compute = t.compute + slept;
  r.dt = t_iter.seconds();
  if (t.device_timed) r.dtb = r.dt - r.dtf;  // the GPU's forwards, then everything else: backward and optimizer
  return r;
}

}  // namespace parallm::train
