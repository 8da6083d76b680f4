#include "parallel/zero.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/gpu.h"
#include "core/timer.h"
#include "kernels/ops.h"

namespace parallm::parallel {

namespace {
// A view labelled with the device it lives on (a host-only backend stages device operands by it).
Tensor f32_view(float* p, int64_t n, Device dev = Device::cpu()) {
  return Tensor::view_of(p, {n}, DType::F32, dev);
}

// n floats from `src` to `dst`, each on the device named (one of them the host, or both on `dev`).
void copy_floats(float* dst, Device to, const float* src, Device from, int64_t n) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  if (n <= 0) return;
  if (to.is_cpu() && from.is_cpu())
    std::memcpy(dst, src, bytes);
  else if (to.is_cpu())
    gpu::memcpy_d2h(dst, src, bytes);
  else if (from.is_cpu())
    gpu::memcpy_h2d(dst, src, bytes);
  else
    gpu::memcpy_d2d(dst, src, bytes);
}

void zero_floats(float* p, Device dev, int64_t n) {
  if (n <= 0) return;
  if (dev.is_cpu())
    std::memset(p, 0, sizeof(float) * static_cast<size_t>(n));
  else
    gpu::memset_zero(p, sizeof(float) * static_cast<size_t>(n));
}
}  // namespace

Offload parse_offload(const std::string& s) {
  if (s == "none") return Offload::None;
  if (s == "optimizer") return Offload::Optimizer;
  if (s == "params") return Offload::Params;
  throw ConfigError("config", fmt::format("zero.offload: expected none, optimizer or params, got \"{}\"", s));
}

const char* offload_name(Offload o) {
  return o == Offload::None ? "none" : o == Offload::Optimizer ? "optimizer" : "params";
}

double Zero::Pending::wait() {
  double s = 0;
  for (auto& w : works) {
    w->wait();
    s += w->seconds();
  }
  works.clear();
  return s;
}

std::vector<Zero::Seg> Zero::segments_of(const model::ParamLayout& layout, int g) {
  const model::ParamLayout::Range r = layout.group(g);
  std::vector<Seg> out{{r.begin, 0, false, {}, 0}};
  if (layout.spec().ep > 1)
    for (const auto& s : layout.slots()) {  // cut where the slots' kind changes (padding stays behind)
      if (s.offset < r.begin || s.offset >= r.end || s.expert_split == out.back().experts) continue;
      if (s.offset == out.back().begin)
        out.back().experts = s.expert_split;
      else
        out.push_back({s.offset, 0, s.expert_split, {}, 0});
    }
  for (size_t i = 0; i < out.size(); ++i) out[i].len = (i + 1 < out.size() ? out[i + 1].begin : r.end) - out[i].begin;
  return out;
}

int64_t Zero::group_count(int g) const {
  const Seg& last = segs_[static_cast<size_t>(end_seg(g)) - 1];
  return last.local + last.piece.count - group_local(g);
}

Zero::Zero(comm::Communicator& comm, const model::ParamLayout& layout, int stage, float* params, float* grads,
           int prefetch, Offload offload, comm::Communicator* tp, comm::Communicator* experts, Device dev)
    : comm_(comm),
      experts_(experts),
      dev_(dev),
      layout_(layout),
      stage_(stage),
      params_(params),
      grads_(grads),
      prefetch_(prefetch),
      offload_(offload) {
  PARALLM_CHECK(offload != Offload::Params || stage == 3, ConfigError, "config",
                "zero.offload=params needs zero.stage=3 (sharded parameters), got stage {}", stage);
  PARALLM_CHECK(stage >= 1 && stage <= 3, ConfigError, "config", "zero.stage={} is not a sharded stage (1, 2 or 3)",
                stage);
  PARALLM_CHECK(prefetch >= 0, ConfigError, "config", "zero.prefetch must be >= 0, got {}", prefetch);
  PARALLM_CHECK(layout.num_groups() > 0, InternalError, "zero", "the layout has no groups to shard");
  PARALLM_CHECK((stage >= 3 || params) && (stage >= 2 || grads), InternalError, "zero",
                "stage {} needs the model's full buffers", stage);
  const int ep = layout.spec().ep, n = comm.size(), me = comm.rank();
  PARALLM_CHECK(
      ep == 1 || (experts && experts->size() * ep == n && experts->rank() == me / ep && tp && tp->size() % ep == 0),
      InternalError, "zero", "an expert-parallel layout (ep {}) needs the expert-data group of {} ranks", ep, n / ep);
  if (ep == 1) experts_ = nullptr;
  for (int g = 0; g < layout.num_groups(); ++g) {
    first_seg_.push_back(static_cast<int>(segs_.size()));
    for (Seg sg : segments_of(layout, g)) {
      const comm::Communicator& c = comm_of(sg);
      sg.piece = comm::shard_of(sg.len, c.size(), c.rank());
      sg.local = shard_size_;
      shard_size_ += sg.piece.count;
      segs_.push_back(sg);
    }
  }
  first_seg_.push_back(static_cast<int>(segs_.size()));
  build_runs();
  const ZeroSizes want = sizes(layout, stage, n, me, prefetch, offload);
  build_views(want);
  if (tp && tp->size() > 1) build_norm_runs(*tp);
  // The norm's exchange: one double per rank (two with tensor parallelism; the experts' over their group), as
  // int32 words.
  const int words = tp_sum_ ? 4 : 2;
  norm_mine_ = Tensor::empty({words}, DType::I32);
  norm_all_ = Tensor::empty({words * n}, DType::I32);
  if (experts_) {
    norm_emine_ = Tensor::empty({2}, DType::I32);
    norm_eall_ = Tensor::empty({2 * experts_->size()}, DType::I32);
  }
  gathers_.works.reserve(segs_.size());
  if (offload != Offload::None) host_grads_ = Array<float>(shard_size_, MemCategory::Offloaded);
  if (offload == Offload::Optimizer) host_params_ = Array<float>(shard_size_, MemCategory::Offloaded);
  check_sizes(want);  // what was allocated is what the planner predicts
}

void Zero::build_views(const ZeroSizes& want) {
  const int stage = stage_;
  if (stage == 1) {
    rs_out_ = DeviceArray<float>(want.max_piece, MemCategory::Comm, dev_);
  } else {
    shard_grads_ = DeviceArray<float>(shard_size_, MemCategory::Grads, dev_);
    // Window 0: the embeddings (held from the head to the end of backward); 1, 2: the blocks, alternating.
    windows_.resize(layout_.num_groups() > 1 ? 3 : 1);
    for (size_t w = 0; w < windows_.size(); ++w) {
      windows_[w].buf = DeviceArray<float>(w == 0 ? group_len(0) : want.block_max, MemCategory::Comm, dev_);
      windows_[w].piece = DeviceArray<float>(want.max_piece, MemCategory::Comm, dev_);
      windows_[w].work.works.reserve(4);
    }
  }
  if (stage == 3) {
    param_shard_ = DeviceArray<float>(
        shard_size_, offload_ == Offload::Params ? MemCategory::Offloaded : MemCategory::Params, shard_device());
    // The embeddings' window, then the block being computed and the prefetched ones.
    pwins_.resize(layout_.num_groups() > 1 ? 2 + static_cast<size_t>(prefetch_) : 1);
    for (size_t w = 0; w < pwins_.size(); ++w) {
      pwins_[w].buf = DeviceArray<float>(w == 0 ? group_len(0) : want.block_max, MemCategory::Params, dev_);
      pwins_[w].work.works.reserve(4);
    }
  }
  for (const Seg& sg : segs_) {
    const int64_t at = sg.begin + sg.piece.offset, cnt = sg.piece.count;
    if (stage == 1) {
      rs_in_.push_back(f32_view(grads_ + sg.begin, sg.len, dev_));
      rs_out_views_.push_back(f32_view(rs_out_.data(), cnt, dev_));
    }
    gather_in_.push_back(stage == 3 ? f32_view(param_shard_.data() + sg.local, cnt, shard_device())
                                    : f32_view(params_ + at, cnt, dev_));
    if (stage < 3) gather_out_.push_back(f32_view(params_ + sg.begin, sg.len, dev_));
  }
}

void Zero::build_runs() {
  // Optimizer runs: each parameter slot cut to this rank's pieces (alignment padding is left alone).
  auto& runs = runs_;
  const bool host = offload_ != Offload::None;  // offloaded, the optimizer steps on contiguous host shards
  for (const Seg& sg : segs_) {
    const int64_t lo = sg.begin + sg.piece.offset, hi = lo + sg.piece.count;
    for (const auto& s : layout_.slots()) {
      const int64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
      if (a >= b) continue;
      const int64_t state = sg.local + (a - lo);
      const int64_t grad = host || stage_ > 1 ? state : a, param = host || stage_ == 3 ? state : a;
      if (!runs.empty() && runs.back().decay == s.decay && runs.back().state + runs.back().length == state &&
          runs.back().param + runs.back().length == param && runs.back().grad + runs.back().length == grad)
        runs.back().length += b - a;
      else
        runs.push_back({param, grad, state, b - a, s.decay});
    }
  }
}

void Zero::build_norm_runs(comm::Communicator& tp) {
  tp_sum_ = std::make_unique<GroupSum>(tp);
  tp_rank_ = layout_.spec().rank;
  ep_rank_ = layout_.spec().ep_rank;
  for (const Seg& sg : segs_) {
    const int64_t lo = sg.begin + sg.piece.offset, hi = lo + sg.piece.count;
    for (const auto& s : layout_.slots()) {
      if (s.tied_copy) continue;  // the pipeline's last stage's copy of wte: counted on the first
      const int64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
      const NormKind kind = s.expert_split          ? NormKind::Experts
                            : s.placement.sharded() ? NormKind::Split
                                                    : NormKind::Whole;
      if (a < b) norm_runs_.push_back({sg.local + (a - lo), a, b - a, kind});
    }
  }
}

void Zero::check_sizes(const ZeroSizes& want) const {
  ZeroSizes got;
  got.shard = shard_size_;
  got.offloaded = static_cast<int64_t>(host_grads_.size() + host_params_.size());
  got.params = offload_ == Offload::Params ? 0 : static_cast<int64_t>(param_shard_.size());
  if (offload_ == Offload::Params) got.offloaded += static_cast<int64_t>(param_shard_.size());
  for (const ParamWindow& w : pwins_) got.params += static_cast<int64_t>(w.buf.size());
  got.grads = static_cast<int64_t>(shard_grads_.size());
  got.comm = static_cast<int64_t>(rs_out_.size());
  for (const Window& w : windows_) got.comm += static_cast<int64_t>(w.buf.size() + w.piece.size());
  PARALLM_CHECK(got.shard == want.shard && got.params == want.params && got.grads == want.grads &&
                    got.comm == want.comm && got.offloaded == want.offloaded,
                InternalError, "zero", "allocated buffers differ from Zero::sizes (a planner bug)");
}

void Zero::copy_pieces(float* base, Device dev, bool contiguous, float* host, bool to_host) const {
  if (contiguous) {  // one run
    if (to_host)
      copy_floats(host, Device::cpu(), base, dev, shard_size_);
    else
      copy_floats(base, dev, host, Device::cpu(), shard_size_);
    return;
  }
  for (const Seg& sg : segs_) {
    float* d = base + sg.begin + sg.piece.offset;
    float* h = host + sg.local;
    if (to_host)
      copy_floats(h, Device::cpu(), d, dev, sg.piece.count);
    else
      copy_floats(d, dev, h, Device::cpu(), sg.piece.count);
  }
}

void Zero::params_to_host(float* out) const {
  copy_pieces(param_base(), stage_ == 3 ? shard_device() : dev_, stage_ == 3, out, true);
}

void Zero::params_from_host(const float* in) const {
  copy_pieces(param_base(), stage_ == 3 ? shard_device() : dev_, stage_ == 3, const_cast<float*>(in), false);
}

std::vector<Zero::Piece> Zero::pieces() const {
  std::vector<Piece> out;
  for (const Seg& sg : segs_) out.push_back({sg.begin + sg.piece.offset, sg.piece.count, sg.local});
  return out;
}

void Zero::drop_windows() {
  for (ParamWindow& w : pwins_) {
    PARALLM_CHECK(!w.pinned, InternalError, "zero", "group {} is still being read", w.group);
    w.work.wait();
    w.group = -1;
  }
}

void Zero::params_changed() {
  if (offload_ == Offload::Optimizer) copy_pieces(param_base(), dev_, stage_ == 3, host_params_.data(), true);
  drop_windows();
}

ZeroSizes Zero::sizes(const model::ParamLayout& layout, int stage, int nranks, int rank, int prefetch,
                      Offload offload) {
  ZeroSizes z;
  const int ep = layout.spec().ep;
  for (int g = 0; g < layout.num_groups(); ++g) {
    const int64_t len = layout.group(g).end - layout.group(g).begin;
    int64_t piece = 0;
    for (const Seg& sg : segments_of(layout, g))
      piece += sg.experts ? comm::shard_of(sg.len, nranks / ep, rank / ep).count
                          : comm::shard_of(sg.len, nranks, rank).count;
    z.shard += piece;
    z.max_piece = std::max(z.max_piece, piece);
    if (g > 0) z.block_max = std::max(z.block_max, len);
  }
  const int64_t max_piece = z.max_piece, block_max = z.block_max;
  const int64_t embed = layout.num_groups() > 0 ? layout.group(0).end - layout.group(0).begin : 0;
  const bool blocks = layout.num_groups() > 1;
  if (stage == 1) z.comm = max_piece;  // a reduce-scatter's output
  if (stage >= 2) {
    z.grads = z.shard;
    z.comm = embed + max_piece + (blocks ? 2 * (block_max + max_piece) : 0);  // gradient windows and their pieces
  }
  if (stage == 3) z.params = z.shard + embed + (blocks ? (1 + prefetch) * block_max : 0);
  if (offload != Offload::None) z.offloaded = z.shard;        // the gradient pieces
  if (offload == Offload::Optimizer) z.offloaded += z.shard;  // the master parameter pieces
  if (offload == Offload::Params) {                           // the parameter shard itself
    z.params -= z.shard;
    z.offloaded += z.shard;
  }
  return z;
}

Zero::ParamWindow* Zero::param_window_of(int g) {
  if (g == 0) return pwins_[0].group == 0 ? &pwins_[0] : nullptr;
  for (size_t i = 1; i < pwins_.size(); ++i)
    if (pwins_[i].group == g) return &pwins_[i];
  return nullptr;
}

Zero::ParamWindow* Zero::free_param_window(int g) {
  if (g == 0) return &pwins_[0];
  ParamWindow* pick = nullptr;
  for (size_t i = 1; i < pwins_.size(); ++i) {
    ParamWindow& w = pwins_[i];
    if (w.pinned || w.work.busy()) continue;  // being read, or a prefetch not yet used
    if (!pick || (w.group < 0 && pick->group >= 0) || ((w.group < 0) == (pick->group < 0) && w.used < pick->used))
      pick = &w;
  }
  return pick;
}

void Zero::gather_into(ParamWindow& w, int g) {
  w.group = g;
  for (int i = first_seg(g); i < end_seg(g); ++i) {
    const Seg& sg = segs_[static_cast<size_t>(i)];
    w.work.works.push_back(
        comm_of(sg).all_gather_async(gather_in_[static_cast<size_t>(i)],
                                     f32_view(w.buf.data() + (sg.begin - layout_.group(g).begin), sg.len, dev_)));
  }
  stats_.all_gather_bytes += group_len(g) * static_cast<int64_t>(sizeof(float));
}

float* Zero::grad_shard(int g) const {
  return shard_grads_.data() + group_local(g);
}

const float* Zero::params(int g, model::Pass pass) {
  if (stage_ < 3) return params_ + layout_.group(g).begin;
  PARALLM_CHECK(g >= 0 && g < layout_.num_groups(), InternalError, "zero", "group {} out of range", g);
  ParamWindow* w = param_window_of(g);
  if (!w) {
    w = free_param_window(g);
    PARALLM_CHECK(w, InternalError, "zero", "no parameter window free for group {}", g);
    gather_into(*w, g);
  }
  w->pinned = true;
  w->used = ++clock_;
  // Prefetch the next groups of this pass while this one computes (the embeddings stay resident).
  for (int k = 1; k <= prefetch_; ++k) {
    const int h = pass == model::Pass::Forward ? g + k : g - k;
    if (h < 1 || h >= layout_.num_groups()) break;
    if (param_window_of(h)) continue;
    ParamWindow* f = free_param_window(h);
    if (!f) break;
    gather_into(*f, h);
  }
  if (w->work.busy()) {
    Timer t;
    stats_.comm_s += w->work.wait();
    stats_.exposed_s += t.seconds();
  }
  return w->buf.data();
}

void Zero::release_params(int g, model::Pass) {
  if (stage_ < 3) return;
  if (ParamWindow* w = param_window_of(g)) w->pinned = false;
}

void Zero::load_group(int g, const float* group) {
  PARALLM_CHECK(stage_ == 3, InternalError, "zero", "load_group is for stage 3");
  for (int i = first_seg(g); i < end_seg(g); ++i) {
    const Seg& sg = segs_[static_cast<size_t>(i)];
    copy_floats(param_shard_.data() + sg.local, shard_device(),
                group + (sg.begin - layout_.group(g).begin) + sg.piece.offset, Device::cpu(), sg.piece.count);
  }
  for (ParamWindow& w : pwins_)
    if (w.group == g) w.group = -1;
}

size_t Zero::window_bytes() const {
  size_t b = 0;
  for (const ParamWindow& w : pwins_) b += w.buf.size() * sizeof(float);
  return b;
}

void Zero::complete(Window& w) {
  if (!w.work.busy()) return;
  Timer t;
  stats_.comm_s += w.work.wait();
  stats_.exposed_s += t.seconds();
  const auto& k = kernels::ops_for(dev_);
  const int g = w.group;
  for (int i = first_seg(g); i < end_seg(g); ++i) {  // the experts' sums divided by the data group's size
    const Seg& sg = segs_[static_cast<size_t>(i)];
    if (sg.experts)
      k.scale_inplace(w.piece.data() + (sg.local - group_local(g)), sg.piece.count,
                      1.0f / static_cast<float>(comm_.size()));
  }
  k.add_inplace(grad_shard(g), w.piece.data(), group_count(g));
  w.group = -1;
}

Zero::Window& Zero::window_for(int g) {
  PARALLM_CHECK(stage_ >= 2, InternalError, "zero", "stage {} keeps the model's own gradient buffer", stage_);
  PARALLM_CHECK(g >= 0 && g < layout_.num_groups(), InternalError, "zero", "group {} out of range", g);
  for (Window& w : windows_)
    if (w.group == g && !w.work.busy()) return w;  // already handed out this micro-step
  Window* pick = nullptr;
  if (g == 0) {
    pick = &windows_[0];
  } else {
    for (size_t i = 1; i < windows_.size(); ++i) {  // a free one, else the oldest in flight
      Window& w = windows_[i];
      PARALLM_CHECK(w.group < 0 || w.work.busy(), InternalError, "zero",
                    "group {} asked for a window while group {} is open", g, w.group);
      if (!pick || (w.group < 0 && pick->group >= 0) || (w.group >= 0 && pick->group >= 0 && w.seq < pick->seq))
        pick = &w;
    }
  }
  complete(*pick);
  zero_floats(pick->buf.data(), dev_, group_len(g));
  pick->group = g;
  return *pick;
}

float* Zero::grads(int g) {
  return window_for(g).buf.data();
}

void Zero::grads_done(int g) {
  Window* w = nullptr;
  for (Window& c : windows_)
    if (c.group == g && !c.work.busy()) w = &c;
  PARALLM_CHECK(w, InternalError, "zero", "group {} reported final without a gradient window", g);
  w->seq = ++seq_;
  for (int i = first_seg(g); i < end_seg(g); ++i) {  // the experts' summed (divided in complete)
    const Seg& sg = segs_[static_cast<size_t>(i)];
    w->work.works.push_back(
        comm_of(sg).reduce_scatter_async(f32_view(w->buf.data() + (sg.begin - layout_.group(g).begin), sg.len, dev_),
                                         f32_view(w->piece.data() + (sg.local - group_local(g)), sg.piece.count, dev_),
                                         sg.experts ? comm::ReduceOp::Sum : comm::ReduceOp::Avg));
  }
  stats_.reduce_scatter_bytes += group_len(g) * static_cast<int64_t>(sizeof(float));
}

void Zero::begin_step() {
  stats_ = {};
  if (stage_ >= 2) zero_floats(shard_grads_.data(), dev_, shard_size_);
}

void Zero::finish_grads() {
  reduce_grads();
  if (offload_ != Offload::None) copy_pieces(grad_base(), dev_, stage_ >= 2, host_grads_.data(), true);
}

void Zero::reduce_grads() {
  if (stage_ >= 2) {
    for (Window& w : windows_) {
      PARALLM_CHECK(w.group < 0 || w.work.busy(), InternalError, "zero",
                    "group {}'s gradients were never reported final: backward did not finish", w.group);
      complete(w);
    }
    return;
  }
  // Stage 1: the full buffer, segment by segment; this rank's mean piece goes back in place.
  for (size_t i = 0; i < segs_.size(); ++i) {
    const Seg& sg = segs_[i];
    float* mine = grads_ + sg.begin + sg.piece.offset;
    Timer t;
    comm_of(sg).reduce_scatter(rs_in_[i], rs_out_views_[i], sg.experts ? comm::ReduceOp::Sum : comm::ReduceOp::Avg);
    const double s = t.seconds();
    stats_.comm_s += s;
    stats_.exposed_s += s;
    stats_.reduce_scatter_bytes += sg.len * static_cast<int64_t>(sizeof(float));
    copy_floats(mine, dev_, rs_out_.data(), dev_, sg.piece.count);
    if (sg.experts) kernels::ops_for(dev_).scale_inplace(mine, sg.piece.count, 1.0f / static_cast<float>(comm_.size()));
  }
}

void Zero::sum_over(comm::Communicator& c, const double* mine, int k, Tensor& send, Tensor& all, double* out) {
  std::memcpy(send.raw(), mine, sizeof(double) * static_cast<size_t>(k));
  c.all_gather(send, all);
  for (int i = 0; i < k; ++i) out[i] = 0;
  for (int r = 0; r < c.size(); ++r)
    for (int i = 0; i < k; ++i) {
      double v = 0;
      std::memcpy(&v, all.data<int32_t>() + 2 * (k * r + i), sizeof(double));
      out[i] += v;
    }
}

double Zero::stage1_squares() {
  // This rank's pieces of the full gradient buffer (one readback on a GPU), added in segment order.
  if (stage1_sq_.offset.empty())
    for (const Seg& sg : segs_) stage1_sq_.add(sg.begin + sg.piece.offset, sg.piece.count);
  double local = 0;
  for (double v : stage1_sq_.squares(dev_, grads_)) local += v;
  return local;
}

double Zero::grad_norm() {
  if (tp_sum_) return tp_grad_norm();
  double local = 0;
  const auto& k = kernels::ops_for(dev_);
  if (offload_ != Offload::None)
    local = kernels::ops_for(Device::cpu()).sum_squares(host_grads_.data(), shard_size_);
  else if (stage_ >= 2)
    local = k.sum_squares(shard_grads_.data(), shard_size_);
  else
    local = stage1_squares();
  // Every rank's double, bit for bit (as two int32 words), added in rank order.
  Timer t;
  double sum = 0;
  sum_over(comm_, &local, 1, norm_mine_, norm_all_, &sum);
  stats_.exposed_s += t.seconds();
  stats_.comm_s += t.seconds();
  return std::sqrt(sum);
}

double Zero::tp_grad_norm() {
  const bool host = offload_ != Offload::None;
  // Every run's squares (one readback on a GPU), added per kind in run order.
  const float* base = host ? host_grads_.data() : stage_ >= 2 ? shard_grads_.data() : grads_;
  if (norm_sq_.offset.empty())
    for (const NormRun& r : norm_runs_) norm_sq_.add(host || stage_ >= 2 ? r.local : r.flat, r.count);
  const std::vector<double>& sq = norm_sq_.squares(host ? Device::cpu() : dev_, base);
  double mine[3] = {0, 0, 0};  // tensor-parallel slots, replicated slots, experts (NormKind)
  for (size_t i = 0; i < norm_runs_.size(); ++i) mine[static_cast<int>(norm_runs_[i].kind)] += sq[i];
  // Over the dp group (the experts' over the expert-data group), bit for bit and in rank order ...
  Timer t;
  double dp[3] = {0, 0, 0};
  sum_over(comm_, mine, 2, norm_mine_, norm_all_, dp);
  if (experts_) sum_over(*experts_, mine + 2, 1, norm_emine_, norm_eall_, dp + 2);
  // ... then the parts over the tp (model) group, a replicated copy counted once, the rest on ep rank 0.
  const double sum = (*tp_sum_)(dp[2] + (ep_rank_ == 0 ? dp[0] + (tp_rank_ == 0 ? dp[1] : 0.0) : 0.0));
  stats_.exposed_s += t.seconds();
  stats_.comm_s += t.seconds();
  return std::sqrt(sum);
}

void Zero::gather_params() {
  if (stage_ == 3) drop_windows();  // the windows hold the old parameters (and no gather may still read the shard)
  if (offload_ == Offload::Optimizer) copy_pieces(param_base(), dev_, stage_ == 3, host_params_.data(), false);
  if (stage_ == 3) return;
  // Every segment gathered in place: this rank's piece is already where it belongs.
  Timer t;
  for (size_t i = 0; i < segs_.size(); ++i) {
    gathers_.works.push_back(comm_of(segs_[i]).all_gather_async(gather_in_[i], gather_out_[i]));
    stats_.all_gather_bytes += segs_[i].len * static_cast<int64_t>(sizeof(float));
  }
  stats_.comm_s += gathers_.wait();
  stats_.exposed_s += t.seconds();
}

int Zero::seg_root(const Seg& sg, int root) const {
  return sg.experts ? root / layout_.spec().ep : root;
}

void Zero::gather_shard(const float* local, float* full, int root) {
  for (int g = 0; g < layout_.num_groups(); ++g)
    gather_group(local, g, full ? full + layout_.group(g).begin : nullptr, root);
}

void Zero::gather_group(const float* local, int g, float* out, int root) {
  for (int i = first_seg(g); i < end_seg(g); ++i) {
    const Seg& sg = segs_[static_cast<size_t>(i)];
    comm::Communicator& c = comm_of(sg);
    const bool me_root = c.rank() == seg_root(sg, root);
    PARALLM_CHECK(!me_root || out, InternalError, "zero", "the root needs the group's buffer");
    c.gather(f32_view(const_cast<float*>(local) + sg.local, sg.piece.count),
             me_root ? f32_view(out + (sg.begin - layout_.group(g).begin), sg.len) : Tensor(), seg_root(sg, root),
             sg.len);
  }
}

void Zero::scatter_shard(const float* full, float* local, int root) {
  for (const Seg& sg : segs_) {
    comm::Communicator& c = comm_of(sg);
    const bool me_root = c.rank() == seg_root(sg, root);
    PARALLM_CHECK(!me_root || full, InternalError, "zero", "the root needs a full buffer");
    c.scatter(me_root ? f32_view(const_cast<float*>(full) + sg.begin, sg.len) : Tensor(),
              f32_view(local + sg.local, sg.piece.count), seg_root(sg, root), sg.len);
  }
}

}  // namespace parallm::parallel
