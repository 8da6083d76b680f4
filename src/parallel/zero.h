// ZeRO (zero.stage=1|2|3): optimizer state, then gradients, then parameters
// sharded over the data-parallel ranks.
//
// Sharding follows the layout's groups (embeddings, then one per transformer
// block): group g of n elements is split by comm::shard_of(n, ranks), so rank
// r owns one contiguous piece of every group and no size is ever an error
// (the first n % ranks ranks hold one element more). A rank's shard is the
// concatenation of its pieces; its optimizer state (AdamW moments) covers the
// shard only, so an optimizer step is the usual fused AdamW over a few runs.
//
// Stage 1: backward fills the model's full gradient buffer as without ZeRO.
// After backward each group is reduce-scattered (mean over ranks) and this
// rank's piece is written back in place; each rank updates its pieces of the
// parameters, and every group is all-gathered in place into the full
// parameter buffer. Per rank: 4 (params) + 4 (grads) + 8/N (moments) bytes
// per parameter.
//
// Stage 2: the model keeps no gradient buffer. It is a ParamStore client:
// each group's gradients go into a window (a communication buffer), and when
// backward reports the group final, the window is reduce-scattered
// asynchronously, overlapping the rest of backward, and this rank's piece is
// added into its gradient shard. The embeddings' window lives from the tied
// head (end of forward) to the end of backward; blocks share two windows, so
// one block's reduce-scatter runs while the next block computes. Per rank:
// 4 + (4 + 8)/N bytes per parameter, plus the windows (accounted as
// communication buffers). With gradient accumulation every micro-step is
// reduce-scattered and the pieces accumulate.
//
// Stage 3 (FSDP): the model keeps no parameters either. Each rank holds its
// pieces of the parameters (the optimizer updates them there); when the
// model asks for a group, it is all-gathered into a parameter window, and
// the next zero.prefetch blocks in the direction of the pass (forward: up,
// backward: down) are gathered asynchronously while the group computes. A
// released window keeps its group until it is needed for another (least
// recently used first), so the last block is not gathered twice between
// forward and backward. The embeddings (also the tied head, used at both
// ends) stay gathered from their first use until the optimizer step.
// Gradients as at stage 2. Per rank: 16/N bytes per parameter plus the
// windows (1 + prefetch blocks and the embeddings, accounted as parameters).
// Initial weights are drawn group by group, so no rank holds them all.
//
// Offload (zero.offload): the optimizer's state lives in the host pool
// (MemCategory::Offloaded) and the optimizer steps there. `optimizer`: the
// pool holds a master copy of this rank's parameter pieces, its gradient
// pieces and the moments; after backward the gradient pieces are copied in,
// after the step the parameter pieces are copied back and gathered. `params`
// (stage 3): the parameter shard itself lives in the pool (gathers read it
// there), so no master copy is needed. On a GPU the copies are the PCIe
// transfers; on a CPU-only machine they are memcpy between two accounted pools.
//
// The optimizer stays in optim/ (a layer above): it is built over runs() with
// shard_size() elements of state, steps on grad_base(), and gather_params()
// then gives every rank the updated parameters.
//
// The global gradient norm is the sum of every rank's squared shard norm
// (doubles, gathered and added in rank order), so clipping sees the whole
// model. Checkpoints are written shard by shard (train/checkpoint/checkpoint.h).
//
// With tensor parallelism (parallel.tp > 1) the layout is this rank's part of
// the model (model::ParamLayout for its ShardSpec) and Zero shards that part
// over the dp group exactly as above: every rank of a tp group has the same
// local shapes, so the pieces sit at the same offsets on each. Only the norm
// changes: a piece's squares are split into the tensor-parallel slots' and
// the replicated slots' (which every rank of the tp group holds a copy of);
// both are summed over the dp group in rank order, then the split parts over
// the tp group in rank order with the replicated sum added once (by tp rank
// 0), so every rank of the world gets the same bits.
//
// With expert parallelism (the layout's ShardSpec has ep > 1) a group's runs
// of expert slots (this rank's experts, held by its expert-data group alone)
// are segments of their own, sharded over the expert-data group (the dp ranks
// i with the same i % ep: rank i / ep there) while the rest of the group is
// sharded over dp as above. Every collective of a group runs per segment on
// its segment's communicator; an expert segment's reduce-scatter sums (each
// rank's expert gradient already holds the tokens its ep group sent it) and
// divides by the dp group's size, as DDP's expert buckets do. The norm adds
// the experts' squares over the expert-data group, then over the model group
// (tp x pp x ep) with every other slot counted on ep rank 0 alone.
//
// On a GPU (`dev`) every buffer above lives on the device except the host
// pool's (offload), the copies and zeroing are the device's, the additions and
// squares its kernels, and the collectives get device tensors (NCCL takes them
// as they are; a host-only backend stages them, comm/device_staging.h). The
// checkpoint side (gather_shard, scatter_shard, gather_group, params_to_host)
// works on host buffers, so checkpoints never see device memory.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/allocator.h"
#include "core/device_array.h"
#include "kernels/ops.h"
#include "model/param_store.h"
#include "model/params.h"
#include "parallel/group_ops.h"
#include "parallel/parallel_config.h"

namespace parallm::parallel {

// Runs of one buffer whose squares a gradient norm adds (offsets and lengths, built once), and the sums'
// buffer: kernels::sum_squares_runs fills it, one readback on a GPU.
struct SquareRuns {
  std::vector<int64_t> offset, count;
  std::vector<double> sum;
  void add(int64_t off, int64_t n) {
    offset.push_back(off);
    count.push_back(n);
    sum.push_back(0.0);
  }
  const std::vector<double>& squares(Device dev, const float* base) {
    kernels::sum_squares_runs(dev, base, offset.data(), count.data(), static_cast<int64_t>(sum.size()), sum.data());
    return sum;
  }
};

// Floats a rank's Zero allocates, per category (the model's own buffers and
// the optimizer's state, shard_size() x 2, not included): what `parallm plan`
// predicts from, and what the constructor checks its allocations against.
struct ZeroSizes {
  int64_t shard = 0;                        // this rank's elements of the flat buffer
  int64_t params = 0, grads = 0, comm = 0;  // parameter shard + windows, gradient shard, comm buffers
  int64_t offloaded = 0;                    // host pool: master parameters, gradient copy (moments not included)
  int64_t max_piece = 0, block_max = 0;     // the largest piece and the largest block group: window sizes
};

// One optimizer step's communication.
struct ZeroStats {
  double comm_s = 0;     // time the collectives ran on the communication thread
  double exposed_s = 0;  // time the training loop waited for them
  int64_t reduce_scatter_bytes = 0, all_gather_bytes = 0, all_reduce_bytes = 0;  // payload per kind
};

class Zero : public model::ParamStore {
 public:
  // params: the model's full parameter buffer (stages 1, 2; nullptr at 3);
  // grads: its full gradient buffer (stage 1 only). prefetch: stage 3's
  // groups gathered ahead.
  // tp: the ranks holding one whole model between them, of which `layout` is
  // a part (tensor x pipeline parallel; nullptr or a group of one: the whole
  // model), for the gradient norm.
  // experts: the expert-data group (needed where the layout is expert parallel; `tp` is then the model group).
  // dev: where the model's buffers live, and this Zero's (but the offloaded ones).
  Zero(comm::Communicator& comm, const model::ParamLayout& layout, int stage, float* params, float* grads,
       int prefetch = 1, Offload offload = Offload::None, comm::Communicator* tp = nullptr,
       comm::Communicator* experts = nullptr, Device dev = Device::cpu());
  // rank of nranks in the dp group (expert parallel: the experts' segments over nranks / ep, rank / ep there).
  static ZeroSizes sizes(const model::ParamLayout& layout, int stage, int nranks, int rank, int prefetch,
                         Offload offload = Offload::None);
  Offload offload() const { return offload_; }
  Device device() const { return dev_; }
  // Where the optimizer steps: the host when its state is offloaded, else the device.
  Device optimizer_device() const { return offload_ == Offload::None ? dev_ : Device::cpu(); }
  // Where the stage-3 parameter shard lives (the host pool with zero.offload=params).
  Device shard_device() const { return offload_ == Offload::Params ? Device::cpu() : dev_; }
  int stage() const { return stage_; }
  int64_t shard_size() const { return shard_size_; }

  // ParamStore (stages 2, 3): parameters are the full buffer (2) or gathered
  // windows (3); gradients go to windows.
  const float* params(int g, model::Pass pass) override;
  void release_params(int g, model::Pass pass) override;
  float* grads(int g) override;
  void grads_done(int g) override;

  // Before an optimizer step's first micro-step.
  void begin_step();
  // After the last micro-step: this rank's gradient shard holds the mean over ranks.
  void finish_grads();
  // L2 norm of the whole gradient (collective).
  double grad_norm();
  // This rank's pieces of each group (one per segment): where each sits in the flat layout and in the shard.
  struct Piece {
    int64_t flat = 0, count = 0, local = 0;
  };
  std::vector<Piece> pieces() const;
  // This rank's shard, for the optimizer: it steps on opt_params() and
  // opt_grads() through runs() (in the host pool when offloaded).
  const std::vector<model::UpdateRun>& runs() const { return runs_; }
  float* opt_params() const { return offload_ == Offload::Optimizer ? host_params_.data() : param_base(); }
  float* opt_grads() const { return offload_ != Offload::None ? host_grads_.data() : grad_base(); }
  // The parameters the model sees: the full buffer (stages 1, 2) or the shard (stage 3).
  float* param_base() const { return stage_ == 3 ? param_shard_.data() : params_; }
  // This rank's parameter pieces, in shard order, copied to host memory `out` (shard_size() floats), and back
  // from it (then params_changed()).
  void params_to_host(float* out) const;
  void params_from_host(const float* in) const;
  float* grad_base() const { return stage_ == 1 ? grads_ : shard_grads_.data(); }
  // After the parameters were set from outside (init, resume): refresh the
  // master copy and drop gathered windows.
  void params_changed();
  // After the optimizer updated this rank's pieces: every rank gets all
  // parameters (stages 1, 2), or the gathered windows are stale (stage 3).
  void gather_params();
  // Stage 3: takes this rank's piece of group g's parameters (all of them, from `group`, host memory).
  void load_group(int g, const float* group);
  // Bytes of parameter windows (stage 3: the gathered blocks and embeddings).
  size_t window_bytes() const;
  const ZeroStats& stats() const { return stats_; }

  // Collective, on host buffers: a shard-sized buffer (e.g. an optimizer moment) assembled in
  // the flat layout on `root` (others pass nullptr), and back. (Checkpoints
  // do not need it: every rank writes and reads its own ranges.)
  void gather_shard(const float* local, float* full, int root);
  void scatter_shard(const float* full, float* local, int root);
  // Group g only: `out` (the group's length, on root; nullptr elsewhere). Expert parallel: the experts'
  // segments go to the rank of root's ep group holding the same experts, so every rank of root's ep group
  // (dp ranks root - root % ep ...) passes `out`.
  void gather_group(const float* local, int g, float* out, int root);

 private:
  // A group's collectives in flight together (one per segment).
  struct Pending {
    std::vector<comm::WorkPtr> works;
    bool busy() const { return !works.empty(); }
    double wait();  // seconds the collectives ran
  };
  struct Window {
    DeviceArray<float> buf, piece;  // the group's gradients; this rank's reduced pieces
    int group = -1;                 // group held (-1: free)
    Pending work;                   // its reduce-scatters, while in flight
    int64_t seq = 0;                // issue order
  };
  struct ParamWindow {
    DeviceArray<float> buf;
    int group = -1;       // group held (-1: none)
    bool pinned = false;  // the model is reading it
    Pending work;         // its all-gathers, until first waited for
    int64_t used = 0;     // last use, for least-recently-used reuse
  };
  // A run of one group sharded over one communicator: the group whole, or (expert parallel) its runs of dense
  // and of expert slots.
  struct Seg {
    int64_t begin = 0, len = 0;  // flat offset and length
    bool experts = false;        // over the expert-data group
    comm::Shard piece;           // this rank's piece, relative to begin
    int64_t local = 0;           // its offset in this rank's shard
  };
  // Group g's segments (flat offset, length, experts), from the layout alone.
  static std::vector<Seg> segments_of(const model::ParamLayout& layout, int g);
  comm::Communicator& comm_of(const Seg& s) const { return s.experts ? *experts_ : comm_; }
  int seg_root(const Seg& s, int root) const;  // a gather's root (a dp rank) in the segment's communicator
  int first_seg(int g) const { return first_seg_[static_cast<size_t>(g)]; }
  int end_seg(int g) const { return first_seg_[static_cast<size_t>(g) + 1]; }
  int64_t group_len(int g) const { return layout_.group(g).end - layout_.group(g).begin; }
  int64_t group_local(int g) const { return segs_[static_cast<size_t>(first_seg(g))].local; }
  int64_t group_count(int g) const;  // this rank's elements of group g
  ParamWindow* param_window_of(int g);
  ParamWindow* free_param_window(int g);  // nullptr if every candidate is pinned or in flight
  void gather_into(ParamWindow& w, int g);
  float* grad_shard(int g) const;  // this rank's reduced piece of group g
  Window& window_for(int g);
  void complete(Window& w);  // waits for its reduce-scatter and adds the piece into the shard

  comm::Communicator& comm_;
  comm::Communicator* experts_ = nullptr;  // expert parallel: the expert-data group
  Device dev_;
  const model::ParamLayout& layout_;
  int stage_;
  float* params_;
  float* grads_;
  std::vector<Seg> segs_;       // every group's segments, in order
  std::vector<int> first_seg_;  // group g's are [first_seg_[g], first_seg_[g + 1])
  int64_t shard_size_ = 0;
  std::vector<model::UpdateRun> runs_;
  DeviceArray<float> shard_grads_;  // stage 2: the reduced gradient shard
  DeviceArray<float> rs_out_;       // stage 1: a piece's reduce-scatter output
  std::vector<Window> windows_;
  int64_t seq_ = 0;
  int prefetch_ = 1;
  Offload offload_ = Offload::None;
  Array<float> host_params_, host_grads_;  // offload: the master parameter pieces, the gradient pieces
  // The constructor's parts: the optimizer's runs (each slot cut to this
  // rank's pieces), the norm's runs under tensor parallelism, and the check
  // that what was allocated is what the planner predicts (InternalError).
  void build_runs();
  void build_norm_runs(comm::Communicator& tp);
  void build_views(const ZeroSizes& want);
  void check_sizes(const ZeroSizes& want) const;
  // Between this rank's pieces in `base` (on `dev`) and the contiguous host shard.
  // contiguous: base is a shard (stage 3 parameters, stage 2-3 gradients), else a full buffer.
  void copy_pieces(float* base, Device dev, bool contiguous, float* host, bool to_host) const;
  void reduce_grads();
  double stage1_squares();          // this rank's pieces' squares in the full gradient buffer
  SquareRuns stage1_sq_, norm_sq_;  // the runs of stage1_squares() and of tp_grad_norm() (norm_runs_), built once
  double tp_grad_norm();
  DeviceArray<float> param_shard_;  // stage 3: this rank's pieces of the parameters
  std::vector<ParamWindow> pwins_;  // stage 3: 0 = embeddings, then 1 + prefetch for blocks
  int64_t clock_ = 0;
  // Made once, used every step: per-segment views for the stage 1 reduce-scatter
  // and the all-gathers, the norm's exchange buffers, the pending gathers.
  std::vector<Tensor> rs_in_, rs_out_views_, gather_in_, gather_out_;
  Tensor norm_mine_, norm_all_, norm_emine_, norm_eall_;
  // Tensor parallel: this rank's pieces cut at the slots (shard offset, flat
  // offset, length, kind: tensor-parallel, replicated or experts), and the group's sum.
  enum class NormKind { Split = 0, Whole = 1, Experts = 2 };
  struct NormRun {
    int64_t local = 0, flat = 0, count = 0;
    NormKind kind = NormKind::Whole;
  };
  std::vector<NormRun> norm_runs_;
  std::unique_ptr<GroupSum> tp_sum_;
  int tp_rank_ = 0, ep_rank_ = 0;
  // This rank's squares per kind (doubles) summed over `comm` in rank order, bit for bit.
  void sum_over(comm::Communicator& c, const double* mine, int k, Tensor& send, Tensor& all, double* out);
  Pending gathers_;
  void drop_windows();  // stage 3: no window holds a group any more
  ZeroStats stats_;
};

}  // namespace parallm::parallel
