#include "parallel/pipeline_runtime.h"

#include <algorithm>
#include <csignal>

#include "core/error.h"
#include "core/log.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "core/text.h"
#include "core/timer.h"
#include "parallel/pipeline_stages.h"
#include "parallel/plan.h"

namespace parallm::parallel {

namespace {
constexpr int kActTag = 0, kGradTag = 1;  // MPI keeps each tag's messages in order per pair

}  // namespace

PipelineConfig PipelineConfig::of(const ParallelConfig& p, int64_t gas, int64_t n_layer) {
  PipelineConfig c;
  c.pp = static_cast<int>(p.pp);
  c.virtual_stages = static_cast<int>(p.pp_virtual);
  c.kind = p.pp_schedule;
  c.layers = p.pp_layers;
  c.gas = gas;
  c.n_layer = n_layer;
  return c;
}

PipeShape PipelineConfig::shape() const {
  const PipeShape s{pp, static_cast<int>(gas), virtual_stages, kind};
  check_pipe_shape(s);
  return s;
}

model::PipelinePart Pipeline::stage_part(const PipelineConfig& cfg, int pp_rank) {
  const PipeShape shape = cfg.shape();
  const PipeSim sim = simulate(shape);
  PARALLM_CHECK(sim.ok, InternalError, "pipeline",
                "the {} schedule for parallel.pp={} optimizer.gas={} V={} fails its simulation: {}",
                pipe_kind_name(shape.kind), shape.p, shape.m, shape.v, sim.error);
  model::PipelinePart part;
  part.stage.chunks = stage_chunks(cfg.n_layer, shape.p, shape.v, pp_rank, cfg.layers);
  part.in_flight = sim.max_in_flight[static_cast<size_t>(pp_rank)];
  // Forward-only passes (evaluation) need one set even where training needs none.
  for (int& n : part.in_flight) n = std::max(n, 1);
  part.split_backward = shape.kind == PipeKind::ZeroBubble;
  return part;
}

Pipeline::Pipeline(const PipelineConfig& cfg, Mesh& mesh, MidStepFault fault)
    : mesh_(mesh), shape_(cfg.shape()), fault_(fault) {
  const int rank = mesh.coord().pp;
  PARALLM_CHECK(mesh.pp().size() == shape_.p && mesh.pp().rank() == rank, InternalError, "pipeline",
                "the pp group ({} ranks, this one {}) is not the mesh's pipeline axis ({}, {})", mesh.pp().size(),
                mesh.pp().rank(), shape_.p, rank);
  part_ = stage_part(cfg, rank);
  if (shape_.m < shape_.p && rank == 0)
    log::warn(
        "optimizer.gas={} micro-batches for parallel.pp={} stages: the pipeline is never full (the {} "
        "schedule idles {:.0f}% of each step); use optimizer.gas >= parallel.pp (a smaller model.batch_size "
        "keeps the global batch)",
        shape_.m, shape_.p, pipe_kind_name(shape_.kind),
        100.0 * bubble_formula(shape_) / (bubble_formula(shape_) + 3.0 * shape_.m));
  actions_ = pipe_actions(shape_, rank);
  forward_actions_ = pipe_forward_actions(shape_, rank);
}

model::PipelinePart Pipeline::part() const {
  return part_;
}

Pipeline::Times Pipeline::execute(model::GPT& m, const std::vector<Action>& list, int64_t B, int64_t T,
                                  const std::function<Micro(int)>& micro, std::vector<float>* losses) {
  comm::Communicator& pp = mesh_.pp();
  const int64_t count = m.message_count(B, T);
  const DType dt = m.compute_dtype();
  auto view = [&](void* p) { return Tensor::view_of(p, {count}, dt, m.device()); };
  // Sends in flight, by chunk, activation set and buffer (the output an F
  // writes, the gradient a receive or a backward writes): the next writer of
  // a buffer waits for its send to leave it, and nothing else waits.
  enum Buffer { kOutput, kGrad };
  struct Pending {
    int chunk, set;
    Buffer buf;
    comm::WorkPtr work;
  };
  std::vector<Pending> pending;
  auto settle = [&](int chunk, int set, Buffer buf) {
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->chunk == chunk && it->set == set && it->buf == buf) {
        it->work->wait();
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
  };
  Times t;
  Timer since_start;
  double last = 0;
  const size_t halfway = fault_.signal != 0 && cur_iter_ == fault_.iter ? list.size() / 2 : list.size();
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (i == halfway) std::raise(fault_.signal);  // testing: a peer dies or hangs mid-step
    const int set = a.micro % part_.in_flight[static_cast<size_t>(a.chunk)];
    const bool compute = a.kind == ActKind::Forward || a.kind == ActKind::Backward ||
                         a.kind == ActKind::BackwardInput || a.kind == ActKind::BackwardWeight;
    if (a.kind == ActKind::Forward) settle(a.chunk, set, kOutput);
    if (a.kind == ActKind::RecvGrad || a.kind == ActKind::Backward || a.kind == ActKind::BackwardInput)
      settle(a.chunk, set, kGrad);
    const double start = since_start.seconds();
    switch (a.kind) {
      case ActKind::Forward: {
        const Micro u = micro(a.micro);
        const float loss = m.forward_chunk(a.chunk, set, u.x, u.y, B, T, u.ctx);
        if (losses && m.last_chunk(a.chunk)) (*losses)[static_cast<size_t>(a.micro)] = loss;
        break;
      }
      case ActKind::Backward:
      case ActKind::BackwardInput:
      case ActKind::BackwardWeight: {
        const Micro u = micro(a.micro);
        const model::BackwardPart part = a.kind == ActKind::Backward        ? model::BackwardPart::All
                                         : a.kind == ActKind::BackwardInput ? model::BackwardPart::Input
                                                                            : model::BackwardPart::Weight;
        m.backward_chunk(a.chunk, set, u.x, B, T, u.ctx, part);
        break;
      }
      case ActKind::SendAct:
        pending.push_back({a.chunk, set, kOutput, pp.send_async(view(m.chunk_output(a.chunk, set)), a.peer, kActTag)});
        break;
      case ActKind::RecvAct:
        pp.recv(view(m.chunk_input(a.chunk, set)), a.peer, kActTag);
        break;
      case ActKind::SendGrad:
        pending.push_back({a.chunk, set, kGrad, pp.send_async(view(m.chunk_grad(a.chunk, set)), a.peer, kGradTag)});
        break;
      case ActKind::RecvGrad:
        pp.recv(view(m.chunk_grad(a.chunk, set)), a.peer, kGradTag);
        break;
    }
    if (!compute) continue;
    const double end = since_start.seconds();
    (a.kind == ActKind::Forward ? t.forward : t.backward) += end - start;
    static_assert(static_cast<int>(ActKind::Forward) == 0 && static_cast<int>(ActKind::BackwardWeight) == 3);
    const int k = static_cast<int>(a.kind);  // Forward, Backward, BackwardInput, BackwardWeight: 0..3
    t.kind_s[k] += end - start;
    ++t.kind_n[k];
    last = end;
  }
  for (auto& p : pending) p.work->wait();
  t.span = last;
  return t;
}

Pipeline::Times Pipeline::step(model::GPT& m, int64_t it, int64_t B, int64_t T, const std::function<Micro(int)>& micro,
                               std::vector<float>& losses) {
  losses.assign(static_cast<size_t>(shape_.m), 0.0f);
  cur_iter_ = it;
  const Times t = execute(m, actions_, B, T, micro, &losses);
  cur_iter_ = -1;
  sum_tied_grads(m);
  from_last_stage(losses.data(), shape_.m);
  return t;
}

float Pipeline::forward_loss(model::GPT& m, const int32_t* x, const int32_t* y, int64_t B, int64_t T,
                             const model::StepContext& ctx) {
  std::vector<float> loss(1, 0.0f);
  execute(
      m, forward_actions_, B, T,
      [&](int) {
        return Micro{x, y, ctx};
      },
      &loss);
  from_last_stage(loss.data(), 1);
  return loss[0];
}

void Pipeline::last_logits(model::GPT& m, const int32_t* tokens, int64_t T, int64_t pos, float* out) {
  execute(
      m, forward_actions_, 1, T,
      [&](int) {
        return Micro{tokens, nullptr, {}};
      },
      nullptr);
  if (mesh_.last_stage()) m.last_logits(out, 1, T, pos);
  from_last_stage(out, m.config().vocab_size);
}

Pipeline::StepTimes Pipeline::train_step(model::GPT& m, GradSync& sync, const StepFeed& f, std::vector<float>& losses) {
  const int64_t N = f.B * f.T;
  const bool reads = m.layout().first_stage() || m.layout().last_stage();
  x_.resize(static_cast<size_t>(reads ? f.gas * N : 0));  // allocated at the first step only
  y_.resize(x_.size());
  m.zero_grad();
  sync.begin_step();
  if (reads) {
    PARALLM_PROFILE("data");
    for (int64_t k = 0; k < f.gas; ++k) f.read(k, x_.data() + k * N, y_.data() + k * N);
  }
  const auto micro = [&](int k) {
    Micro u;
    if (reads) {
      u.x = x_.data() + k * N;
      u.y = y_.data() + k * N;
    }
    u.ctx = f.context(k);
    return u;
  };
  const Times pt = step(m, f.it, f.B, f.T, micro, losses);
  Timer tc;
  grads_final(m, sync);
  StepTimes t;
  t.forward = pt.forward;
  t.backward = pt.backward + tc.seconds();
  t.compute = pt.forward + pt.backward;
  stage_times(pt, t.stage_idle, t.stage_cost_ms);
  return t;
}

void Pipeline::grads_final(const model::GPT& m, GradSync& sync) const {
  if (const auto hook = sync.before_pass(shape_.m - 1, shape_.m, 0))
    for (int u = m.layout().num_units() - 1; u >= 0; --u) hook(u);
  sync.after_pass(0);
  sync.after_micro_step();
}

void Pipeline::stage_times(const Times& t, std::vector<double>& idle, std::vector<double>& cost_ms) const {
  comm::Communicator& pp = mesh_.pp();
  constexpr int kw = 6;  // busy, span, four kinds' mean ms
  Tensor mine = Tensor::empty({kw}, DType::F32), all = Tensor::empty({kw * pp.size()}, DType::F32);
  float* v = mine.data<float>();
  v[0] = static_cast<float>(t.forward + t.backward);
  v[1] = static_cast<float>(t.span);
  for (int k = 0; k < 4; ++k) v[2 + k] = t.kind_n[k] ? static_cast<float>(t.kind_s[k] / t.kind_n[k] * 1e3) : 0.0f;
  pp.all_gather(mine, all);
  const float* a = all.data<float>();
  double span = 0;
  for (int r = 0; r < pp.size(); ++r) span = std::max(span, static_cast<double>(a[kw * r + 1]));
  for (int r = 0; r < pp.size(); ++r) {
    idle.push_back(span > 0 ? std::max(0.0, 1.0 - a[kw * r] / span) : 0.0);
    for (int k = 0; k < 4; ++k) cost_ms.push_back(a[kw * r + 2 + k]);
  }
}

void Pipeline::sum_tied_grads(model::GPT& m) {
  comm::Communicator* ends = mesh_.ends();
  if (!ends || ends->size() == 1 || !m.config().tie_embeddings) return;
  const model::ParamSlot& s = m.layout().wte_slot();
  ends->all_reduce(Tensor::view_of(m.grads() + s.offset, {s.numel}, DType::F32, m.device()), comm::ReduceOp::Sum);
}

void Pipeline::tied_params_from_first(model::GPT& m) {
  comm::Communicator* ends = mesh_.ends();
  if (!ends || ends->size() == 1 || !m.config().tie_embeddings) return;
  const model::ParamSlot& s = m.layout().wte_slot();
  ends->broadcast(Tensor::view_of(m.params() + s.offset, {s.numel}, DType::F32, m.device()), 0);
  m.params_changed();
}

void Pipeline::from_last_stage(float* v, int64_t n) {
  comm::Communicator& pp = mesh_.pp();
  if (pp.size() > 1) pp.broadcast(Tensor::view_of(v, {n}, DType::F32, Device::cpu()), pp.size() - 1);
}

}  // namespace parallm::parallel
