#include "train/step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/gpu.h"
#include "core/profiler.h"
#include "core/timer.h"

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
  std::vector<std::unique_ptr<gpu::Event>> marks_;
};

// Pipeline parallel: the step's micro-batches through this rank's stage, as
// its schedule's actions say (train/pipeline.h). The stages at the ends read
// the batches (the first its tokens, the last its targets). The gradients
// are final only after the last action: the sync then sees every unit ready
// at once, as after one micro-step's backward.
class PipelineSteps : public Schedule {
 public:
  explicit PipelineSteps(Session& s) : s_(s) {
    const int64_t gas = s.cfg.optimizer.gas, N = s.batch() * s.local_seq();
    const bool reads = s.model->layout().first_stage() || s.model->layout().last_stage();
    x_.assign(static_cast<size_t>(reads ? gas * N : 0), 0);
    y_.assign(x_.size(), 0);
  }

  PassTimes run(int64_t it, std::vector<float>& losses) override {
    model::GPT& m = *s_.model;
    parallel::GradSync& sync = *s_.sync;
    const int64_t gas = s_.cfg.optimizer.gas, B = s_.batch(), T = s_.local_seq(), N = B * T;
    const int64_t batch = s_.cfg.train.skip_batches.data_index(it);  // the global batch (train.skip_batches)
    m.zero_grad();
    sync.begin_step();
    if (!x_.empty()) {
      PARALLM_PROFILE("data");
      for (int64_t micro = 0; micro < gas; ++micro)
        s_.loader->get(data::Split::Train, batch, micro, x_.data() + micro * N, y_.data() + micro * N);
    }
    const auto micro = [&](int k) {
      Pipeline::Micro u;
      if (!x_.empty()) {
        u.x = x_.data() + k * N;
        u.y = y_.data() + k * N;
      }
      u.ctx = {true,
               true,
               s_.cfg.train.seed,
               static_cast<uint64_t>(it * gas + k),
               s_.scaler->scale() / static_cast<float>(gas),  // exact: S is a power of two
               nullptr,
               s_.mesh->coord().dp * B};
      u.ctx.watch = s_.watch.get();
      return u;
    };
    const Pipeline::Times pt = s_.pipe->step(m, it, B, T, micro, losses);
    Timer tc;
    if (const auto hook = sync.before_pass(static_cast<int>(gas - 1), static_cast<int>(gas), 0))
      for (int u = m.layout().num_units() - 1; u >= 0; --u) hook(u);
    sync.after_pass(0);
    sync.after_micro_step();
    PassTimes t;
    t.dtf = pt.forward;
    t.dtb = pt.backward + tc.seconds();
    t.compute = pt.forward + pt.backward;
    stage_times(pt, t);
    return t;
  }

  void after_update() override { s_.pipe->tied_params_from_first(*s_.model); }

 private:
  // Every stage's busy time, span and mean cost per action kind, gathered over the pp group.
  void stage_times(const Pipeline::Times& pt, PassTimes& t) const {
    comm::Communicator& pp = s_.mesh->pp();
    constexpr int kw = 6;  // busy, span, four kinds' mean ms
    Tensor mine = Tensor::empty({kw}, DType::F32), all = Tensor::empty({kw * pp.size()}, DType::F32);
    float* v = mine.data<float>();
    v[0] = static_cast<float>(pt.forward + pt.backward);
    v[1] = static_cast<float>(pt.span);
    for (int k = 0; k < 4; ++k) v[2 + k] = pt.kind_n[k] ? static_cast<float>(pt.kind_s[k] / pt.kind_n[k] * 1e3) : 0.0f;
    pp.all_gather(mine, all);
    const float* a = all.data<float>();
    double span = 0;
    for (int r = 0; r < pp.size(); ++r) span = std::max(span, static_cast<double>(a[kw * r + 1]));
    for (int r = 0; r < pp.size(); ++r) {
      t.stage_idle.push_back(span > 0 ? std::max(0.0, 1.0 - a[kw * r] / span) : 0.0);
      for (int k = 0; k < 4; ++k) t.stage_cost_ms.push_back(a[kw * r + 2 + k]);
    }
  }

  Session& s_;
  std::vector<int32_t> x_, y_;
};

void write_inf(float* p, Device dev) {
  const float inf = std::numeric_limits<float>::infinity();
  if (dev.is_cpu())
    *p = inf;
  else
    gpu::memcpy_h2d(p, &inf, sizeof(float));
}

// PARALLM_FAULT_INF_GRAD: an inf in this rank's reduced gradients (where it holds any).
void inject_fault(const Session& s, int64_t it) {
  if (std::find(s.fault_inf.begin(), s.fault_inf.end(), it) == s.fault_inf.end()) return;
  const parallel::UpdateTarget u = s.sync->update();
  if (u.state_size <= 0) return;
  // Not into a pipeline's tied copy of the token table (the norm leaves it out).
  int64_t at = 0;
  if (!u.runs)
    for (const auto& slot : s.model->layout().slots())
      if (!slot.tied_copy) {
        at = slot.offset;
        break;
      }
  write_inf(u.grads + at, u.device);
}

// PARALLM_FAULT_SCALE: from its iteration on, its parameter multiplied by its
// factor before each step, wherever this rank holds it (every tensor-parallel
// part; both pipeline ends' copies of the tied table).
void scale_fault(Session& s, int64_t it) {
  const ScaleFault& f = s.fault_scale;
  if (f.from < 0 || it < f.from) return;
  model::GPT& m = *s.model;
  for (const auto& slot : m.layout().slots()) {
    if (slot.name != f.param) continue;
    float* p = m.params() + slot.offset;
    std::vector<float> host(static_cast<size_t>(slot.numel));
    if (s.dev.is_cpu())
      std::copy(p, p + slot.numel, host.begin());
    else
      gpu::memcpy_d2h(host.data(), p, host.size() * sizeof(float));
    for (float& v : host) v *= f.factor;
    if (s.dev.is_cpu())
      std::copy(host.begin(), host.end(), p);
    else
      gpu::memcpy_h2d(p, host.data(), host.size() * sizeof(float));
  }
  m.params_changed();
}

// PARALLM_FAULT_SPIKE: this rank's reduced gradients times kSpike (the mean loss too: optimizer_step).
constexpr float kSpike = 100;
bool spike_at(const Session& s, int64_t it) {
  return std::find(s.fault_spike.begin(), s.fault_spike.end(), it) != s.fault_spike.end();
}
void inject_spike(const Session& s, int64_t it) {
  if (!spike_at(s, it)) return;
  const parallel::UpdateTarget u = s.sync->update();
  std::vector<std::pair<int64_t, int64_t>> runs;  // [begin, count) of the gradients the optimizer reads
  if (u.runs)
    for (const auto& r : *u.runs) runs.emplace_back(r.grad, r.length);
  else
    runs.emplace_back(0, u.state_size);
  for (const auto& [at, n] : runs) {
    if (n <= 0) continue;
    std::vector<float> host;
    float* g = u.grads + at;
    if (!u.device.is_cpu()) {  // a test hook: through the host
      host.resize(static_cast<size_t>(n));
      gpu::memcpy_d2h(host.data(), g, static_cast<size_t>(n) * sizeof(float));
      g = host.data();
    }
    for (int64_t i = 0; i < n; ++i) g[i] *= kSpike;
    if (!host.empty()) gpu::memcpy_h2d(u.grads + at, host.data(), static_cast<size_t>(n) * sizeof(float));
  }
}

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
}

}  // namespace

std::unique_ptr<Schedule> make_schedule(Session& s) {
  if (s.pipe) return std::make_unique<PipelineSteps>(s);
  return std::make_unique<MicroBatches>(s);
}

StepResult optimizer_step(Session& s, Schedule& schedule, int64_t it, float lr) {
  std::vector<float>& losses = s.losses;
  Timer t_iter;
  scale_fault(s, it);
  double slept = 0;
  if (s.fault_slow_s > 0) {  // PARALLM_FAULT_SLOW_RANK: a slower device, as a sleep before the passes
    Timer ts;
    std::this_thread::sleep_for(std::chrono::duration<double>(s.fault_slow_s));
    slept = ts.seconds();
  }
  PassTimes t = schedule.run(it, losses);
  Timer to;
  s.sync->finish_step();
  inject_fault(s, it);
  inject_spike(s, it);
  const double norm = s.sync->grad_norm(s.scaler->dynamic());
  schedule.settle(t);
  StepResult r;
  r.loss = s.sync->mean_loss(losses, s.cfg.optimizer.gas);
  if (spike_at(s, it)) r.loss *= kSpike;
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
