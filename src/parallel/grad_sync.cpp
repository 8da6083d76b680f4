// The three gradient syncs over the data-parallel group (see grad_sync.h).
// Each wraps the mechanism that does the work (DataParallel,
// DeterministicGrads, Zero) and answers the trainer's questions in its terms.
#include "parallel/grad_sync.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/text.h"
#include "kernels/ops.h"
#include "parallel/ddp.h"
#include "parallel/deterministic.h"
#include "parallel/group_ops.h"

namespace parallm::parallel {

namespace {

// The sum of squares of the whole model's gradient, from this rank's. The
// ranks of `model_sum` (tensor x pipeline parallel: the ranks holding one
// whole model between them) hold parts of the split parameters, their stage's
// replicated ones and, on the pipeline's last stage, a copy of the tied token
// table: the parts' squares are summed over the group, a replicated
// parameter's counted once (tp rank 0's, so every rank gets the same bits even
// if replicated gradients ever differed across the group), a tied copy not at all.
// With expert parallelism the group spans the ep group too (tp x pp x ep):
// each rank's experts count, every other parameter on ep rank 0 alone.
// `runs`: the slots' runs, filled on first use.
double model_sum_squares(const model::GPT& m, Device dev, GroupSum* model_sum, SquareRuns& runs) {
  const auto& k = kernels::ops_for(dev);
  if (!model_sum) return k.sum_squares(m.grads(), m.flat_size());
  // Each slot's squares (one readback on a GPU), added per kind in slot order.
  if (runs.offset.empty())
    for (const auto& s : m.layout().slots())
      if (!s.tied_copy) runs.add(s.offset, s.numel);
  const std::vector<double>& sq = runs.squares(dev, m.grads());
  double experts = 0, split = 0, whole = 0;
  size_t i = 0;
  for (const auto& s : m.layout().slots())
    if (!s.tied_copy) (s.expert_split ? experts : s.placement.sharded() ? split : whole) += sq[i++];
  const model::ShardSpec& spec = m.layout().spec();
  return (*model_sum)(experts + (spec.ep_rank == 0 ? split + (spec.rank == 0 ? whole : 0.0) : 0.0));
}

// Replicas' parameters (or a buffer of the layout, on `dev`) made the same across the data group: the
// experts' over the expert-data group (`experts`, expert parallel), the rest over `dp`.
void broadcast_layout(comm::Communicator& dp, comm::Communicator* experts, const model::GPT& m, float* x, Device dev) {
  if (!experts) return broadcast_floats(dp, x, m.flat_size(), dev);
  const auto& slots = m.layout().slots();
  for (size_t i = 0; i < slots.size();) {  // runs of slots of one kind
    size_t j = i;
    while (j < slots.size() && slots[j].expert_split == slots[i].expert_split) ++j;
    const int64_t end = j < slots.size() ? slots[j].offset : m.flat_size();
    broadcast_floats(slots[i].expert_split ? *experts : dp, x + slots[i].offset, end - slots[i].offset, dev);
    i = j;
  }
}

// The global norm of a whole replica's gradient; replicas each compute
// their own copy, so with `agree` they settle whether it is finite together
// (no rank skips an overflowed step alone).
double replica_norm(const model::GPT& m, Device dev, GroupAll& all, GroupSum* tp_sum, SquareRuns& runs, bool agree) {
  double norm = std::sqrt(model_sum_squares(m, dev, tp_sum, runs));
  if (agree && !all(std::isfinite(norm))) norm = std::numeric_limits<double>::infinity();
  return norm;
}

// The mean of this rank's pass losses (in order, in double), then over the group.
float replica_mean_loss(GroupMean& mean, const std::vector<float>& local, int64_t batches) {
  double acc = 0;
  for (float l : local) acc += l;
  return mean(static_cast<float>(acc / static_cast<double>(batches)));
}

// Every rank holds the whole model: what replicas share.
class ReplicaSync : public GradSync {
 public:
  ReplicaSync(comm::Communicator& dp, model::GPT& m, Device dev, comm::Communicator* tp,
              comm::Communicator* experts = nullptr)
      : dp_(dp), experts_(experts), m_(m), dev_(dev), mean_(dp), all_(dp) {
    if (tp && tp->size() > 1) tp_sum_ = std::make_unique<GroupSum>(*tp);
  }
  float mean_loss(const std::vector<float>& local, int64_t batches) override {
    return replica_mean_loss(mean_, local, batches);
  }
  double grad_norm(bool agree) override { return replica_norm(m_, dev_, all_, tp_sum_.get(), sq_runs_, agree); }
  UpdateTarget update() override {
    return {m_.params(), m_.grads(), dev_, nullptr, m_.flat_size(), MemCategory::OptState, m_.weight_copy_for_step()};
  }
  void updated(bool copy_written) override {
    if (!copy_written) m_.params_changed();
  }
  void init_params(uint64_t seed) override {
    m_.init_weights(seed);
    params_loaded();
  }
  void params_loaded() override {
    broadcast_layout(dp_, experts_, m_, m_.params(), dev_);  // identical replicas, whatever each rank did
    m_.params_changed();
  }
  bool reads_checkpoint() const override { return experts_ ? experts_->rank() == 0 : dp_.rank() == 0; }
  void spread(float* x) override { broadcast_layout(dp_, experts_, m_, x, dev_); }  // x: the optimizer's, on dev_
  HeldState held() const override { return {}; }
  const float* params_to_save(Array<float>&) const override { return m_.params(); }

 protected:
  comm::Communicator& dp_;
  comm::Communicator* experts_;  // expert parallel: the expert-data group
  model::GPT& m_;
  Device dev_;
  GroupMean mean_;
  GroupAll all_;
  std::unique_ptr<GroupSum> tp_sum_;  // tensor parallel: the norm's sum over the group
  SquareRuns sq_runs_;                // tensor parallel: the slots whose squares the norm adds
};

// DDP: gradients averaged by bucketed all-reduces during backward (nothing on one rank).
class DdpSync : public ReplicaSync {
 public:
  DdpSync(comm::Communicator& dp, model::GPT& m, Device dev, const GradSyncOptions& opt, comm::Communicator* tp,
          comm::Communicator* experts)
      : ReplicaSync(dp, m, dev, tp, experts), bucket_mb_(opt.bucket_mb) {
    if (dp.size() > 1) {
      ddp_ = std::make_unique<DataParallel>(dp, m.layout(), m.grads(), DdpOptions{opt.bucket_mb, experts, dev});
      hook_ = ddp_->hook();
    }
  }
  std::string describe() const override {
    return ddp_ ? fmt::format("ddp: {} gradient buckets of up to {} MiB, all-reduced during backward",
                              ddp_->num_buckets(), bucket_mb_)
                : "";
  }
  bool communicates() const override { return ddp_ != nullptr; }
  // Gradients are averaged across ranks on the last micro-step only.
  std::function<void(int)> before_pass(int micro, int gas, int) override { return micro == gas - 1 ? hook_ : nullptr; }
  void finish_step() override {
    if (ddp_) ddp_->finish();
  }
  SyncStats stats() const override {
    if (!ddp_) return {};
    const DdpStats& cs = ddp_->stats();
    return {{{"comm_ms", cs.comm_s * 1e3},
             {"comm_exposed_ms", cs.exposed_s * 1e3},
             {"comm_bytes", static_cast<double>(cs.bytes), true},
             {"comm_bytes_all_reduce", static_cast<double>(cs.bytes), true}},
            fmt::format(", comm {:.1f}ms ({:.0f}% not overlapped)", cs.comm_s * 1e3,
                        cs.comm_s > 0 ? 100.0 * std::min(1.0, cs.exposed_s / cs.comm_s) : 0.0)};
  }

 private:
  double bucket_mb_;
  std::unique_ptr<DataParallel> ddp_;
  std::function<void(int)> hook_;
};

// Replicas whose gradients and losses are summed in a fixed order: each
// pass's gradient is computed alone and added shard by shard.
class DeterministicSync : public ReplicaSync {
 public:
  DeterministicSync(comm::Communicator& dp, model::GPT& m, Device dev, const GradSyncOptions& opt,
                    comm::Communicator* tp)
      : ReplicaSync(dp, m, dev, tp),
        det_(dp, m.flat_size(), opt.local_shards, dev),
        samples_(opt.micro_batch / opt.local_shards) {}
  std::string describe() const override {
    return fmt::format(
        "ddp: deterministic, gradients of {} shard{} of {} samples summed in a fixed order (not "
        "overlapped)",
        det_.shards(), det_.shards() > 1 ? "s" : "", samples_);
  }
  int passes() const override { return det_.local_shards(); }
  bool communicates() const override { return true; }
  void begin_step() override { det_.begin_step(); }
  std::function<void(int)> before_pass(int, int, int) override {
    m_.zero_grad();  // each shard's gradient alone
    return nullptr;
  }
  void after_pass(int pass) override { det_.add_shard(pass, m_.grads()); }
  void after_micro_step() override { det_.end_micro_step(m_.grads()); }
  void finish_step() override { det_.finish(m_.grads()); }
  float mean_loss(const std::vector<float>& local, int64_t batches) override { return det_.mean_loss(local, batches); }
  SyncStats stats() const override {
    if (dp_.size() == 1) return {};
    const double ms = det_.comm_seconds() * 1e3;
    return {{{"comm_ms", ms}, {"comm_exposed_ms", ms}},
            fmt::format(", comm {:.1f}ms (deterministic, not overlapped)", ms)};
  }

 private:
  DeterministicGrads det_;
  int64_t samples_;
};

// ZeRO: this rank holds a shard of the optimizer state (stage 1), of the
// gradients (2) and of the parameters (3).
class ZeroSync : public GradSync {
 public:
  ZeroSync(comm::Communicator& dp, model::GPT& m, Device dev, const GradSyncOptions& opt, comm::Communicator* tp,
           comm::Communicator* experts)
      : dp_(dp),
        experts_(experts),
        m_(m),
        dev_(dev),
        opt_(opt),
        zero_(dp, m.layout(), opt.zero_stage, m.params(), m.grads(), opt.zero_prefetch, opt.offload, tp, experts, dev),
        mean_(dp) {
    if (opt.zero_stage >= 2) m.set_store(&zero_);
    if (opt.zero_stage == 3 && !zero_.shard_device().is_cpu())  // the shard's host copy for checkpoints
      host_shard_ = Array<float>(static_cast<size_t>(zero_.shard_size()), MemCategory::Other);
  }
  std::string describe() const override {
    const int s = opt_.zero_stage;
    return fmt::format(
        "zero: stage {}, this rank's shard {} of {} elements ({} groups){}", s, zero_.shard_size(), m_.flat_size(),
        m_.layout().num_groups(),
        (s == 3   ? fmt::format(", parameters gathered per block ({} ahead)", opt_.zero_prefetch)
         : s == 2 ? std::string(", gradients reduce-scattered during backward")
                  : std::string()) +
            (opt_.offload != Offload::None ? std::string(", offload ") + offload_name(opt_.offload) : std::string()));
  }
  bool communicates() const override { return true; }
  void begin_step() override { zero_.begin_step(); }
  std::function<void(int)> before_pass(int, int, int) override { return nullptr; }
  void finish_step() override { zero_.finish_grads(); }
  float mean_loss(const std::vector<float>& local, int64_t batches) override {
    return replica_mean_loss(mean_, local, batches);
  }
  double grad_norm(bool) override { return zero_.grad_norm(); }  // one collective sum: the same everywhere
  UpdateTarget update() override {
    return {zero_.opt_params(),
            zero_.opt_grads(),
            zero_.optimizer_device(),
            &zero_.runs(),
            zero_.shard_size(),
            zero_.offload() != Offload::None ? MemCategory::Offloaded : MemCategory::OptState,
            nullptr};
  }
  void updated(bool) override {
    zero_.gather_params();
    m_.params_changed();
  }
  void init_params(uint64_t seed) override {
    if (opt_.zero_stage < 3) {
      m_.init_weights(seed);
    } else {
      // Every rank draws the same values group by group and keeps its pieces.
      const model::ParamLayout& layout = m_.layout();
      Array<float> gp(static_cast<size_t>(layout.max_group_size()), MemCategory::Other);
      for (int g = 0; g < layout.num_groups(); ++g) {
        layout.init_group(g, gp.data(), seed);
        zero_.load_group(g, gp.data());
      }
    }
    params_loaded();
  }
  void params_loaded() override {
    if (opt_.zero_stage < 3) broadcast_layout(dp_, experts_, m_, m_.params(), dev_);
    zero_.params_changed();  // the master copy (offload) and the windows follow
    m_.params_changed();
  }
  HeldState held() const override {
    float* shard = opt_.zero_stage < 3 ? nullptr : host_shard_.size() ? host_shard_.data() : zero_.param_base();
    return {true, zero_.pieces(), shard};
  }
  void to_host() override {
    if (host_shard_.size()) zero_.params_to_host(host_shard_.data());
  }
  void from_host() override {
    if (host_shard_.size()) zero_.params_from_host(host_shard_.data());
  }
  void gather_group(const float* local, int g, float* out, int root) override {
    zero_.gather_group(local, g, out, root);
  }
  const float* params_to_save(Array<float>& out) const override {
    if (opt_.zero_stage == 3 && zero_.shard_device().is_cpu()) return zero_.param_base();
    out = Array<float>(static_cast<size_t>(zero_.shard_size()), MemCategory::Other);
    zero_.params_to_host(out.data());
    return out.data();
  }
  bool collective_sampling() const override { return opt_.zero_stage == 3; }
  SyncStats stats() const override {
    if (dp_.size() == 1) return {};
    const ZeroStats& zs = zero_.stats();
    return {
        {{"comm_ms", zs.comm_s * 1e3},
         {"comm_exposed_ms", zs.exposed_s * 1e3},
         {"comm_bytes", static_cast<double>(zs.reduce_scatter_bytes + zs.all_gather_bytes + zs.all_reduce_bytes), true},
         {"comm_bytes_reduce_scatter", static_cast<double>(zs.reduce_scatter_bytes), true},
         {"comm_bytes_all_gather", static_cast<double>(zs.all_gather_bytes), true}},
        fmt::format(", comm {:.1f}ms ({:.1f} ms waited), reduce-scatter {} + all-gather {}", zs.comm_s * 1e3,
                    zs.exposed_s * 1e3, format_bytes(static_cast<size_t>(zs.reduce_scatter_bytes)),
                    format_bytes(static_cast<size_t>(zs.all_gather_bytes)))};
  }
  std::string memory_note(const MemStats& ms) const override {
    if (opt_.zero_stage != 3) return "";
    const auto n = static_cast<double>(m_.layout().count());
    const size_t windows = zero_.window_bytes();
    return fmt::format(
        "zero: of the parameters, {} ({:.2f} B/param) are the gathered windows (embeddings and {} block{}); the "
        "shard is {:.2f} B/param",
        format_bytes(windows), static_cast<double>(windows) / n, 1 + opt_.zero_prefetch,
        opt_.zero_prefetch > 0 ? "s" : "",
        static_cast<double>(ms.peak[static_cast<int>(MemCategory::Params)] - windows) / n);
  }

 private:
  comm::Communicator& dp_;
  comm::Communicator* experts_;  // expert parallel: the expert-data group
  model::GPT& m_;
  Device dev_;
  GradSyncOptions opt_;
  Zero zero_;
  GroupMean mean_;
  Array<float> host_shard_;  // stage 3 on a GPU: the shard's host copy (held(), to_host, from_host)
};

}  // namespace

void GradSync::gather_group(const float*, int g, float*, int root) {
  throw InternalError("grad_sync", fmt::format("gather_group is for sharded state (group {}, root {})", g, root));
}

GradSyncOptions resolve_grad_sync(GradSyncOptions o, int dp_size) {
  o.local_shards = 1;
  if (!o.deterministic) return o;
  PARALLM_CHECK(dp_size == 1 || o.shards == 0 || o.shards == dp_size, ConfigError, "config",
                "ddp.shards={} on {} data-parallel ranks: each rank is one shard there (leave ddp.shards unset)",
                o.shards, dp_size);
  if (dp_size == 1 && o.shards > 0) o.local_shards = static_cast<int>(o.shards);
  PARALLM_CHECK(o.micro_batch % o.local_shards == 0, ConfigError, "config",
                "ddp.shards={} does not divide model.batch_size={}", o.local_shards, o.micro_batch);
  return o;
}

std::unique_ptr<GradSync> make_grad_sync(comm::Communicator& dp, model::GPT& m, Device dev, const GradSyncOptions& opt,
                                         comm::Communicator* tp, comm::Communicator* experts) {
  const bool ep = m.layout().spec().ep > 1;
  PARALLM_CHECK(!ep || (experts && !opt.deterministic), ConfigError, "config",
                "expert parallelism runs with DDP or ZeRO (ddp.deterministic=false) for now");
  if (opt.zero_stage > 0) return std::make_unique<ZeroSync>(dp, m, dev, opt, tp, ep ? experts : nullptr);
  if (opt.deterministic) return std::make_unique<DeterministicSync>(dp, m, dev, opt, tp);
  return std::make_unique<DdpSync>(dp, m, dev, opt, tp, ep ? experts : nullptr);
}

model::GPTStorage model_storage(const GradSyncOptions& opt, DType compute) {
  return {opt.zero_stage < 3, opt.zero_stage < 2, compute};
}

}  // namespace parallm::parallel
