// The "nccl" backend: collectives between GPUs through NCCL, behind the same
// Communicator as the CPU backends, so DDP overlaps its all-reduces with the
// backward pass on the GPU exactly as it does on the CPU.
//
// Design:
// - Ordering. When an operation is issued, an event is recorded on the
//   caller's compute stream (issued()): the operation waits for the GPU work
//   queued before it and for nothing after. The communication thread then
//   queues the NCCL calls on the group's own stream and records a completion
//   event, which poll() checks; wait() returns once the data has arrived, so
//   anything queued afterwards (on any stream) sees it. The compute stream
//   never waits for the network.
// - Tensors. Device memory goes to NCCL as it is (found by the pointer, not by
//   the tensor's tag). Host tensors (losses, counters, the train state) are
//   staged through device buffers; a host reduction of bf16 or uint16 is
//   widened to fp32 or int32 on the way, as the MPI backend accumulates.
//   Device reductions of bf16 use NCCL's own bf16 arithmetic; uint16 has no
//   NCCL type and is reduced only from host memory.
// - Counts that do not divide by the group: all_gather and reduce_scatter use
//   NCCL's ring collectives when they do, and otherwise one broadcast or
//   reduce per rank in one NCCL group (the shard_of partition). gather,
//   scatter and all_to_all are grouped point-to-point calls.
// - Start. Under an MPI launcher an MPI communicator carries the unique id and
//   stays as the control plane: before each collective the ranks compare its
//   signature over MPI, so a skipped or mismatched collective is an error, not
//   a hang inside NCCL. Without MPI, rank 0 passes the id through a FileStore
//   (PARALLM_STORE_DIR) and there is no signature check. One rank needs neither.
// - Failure. An operation past comm.timeout_s breaks the group (QueuedComm).
//   Buffers of operations that may still run on the GPU are kept until the
//   communicator goes, and then it is aborted, not destroyed, so no kernel is
//   left waiting for a peer. abort() ends the job through MPI (or exits; the
//   peers' NCCL calls then fail on the closed connections) without touching
//   NCCL, whose abort needs every local rank.
// - Point to point. NCCL pairs a send with its peer's receives on the same
//   communicator in the order posted, and an unpaired send (or receive) holds
//   its stream until the peer's match runs: two ranks that each send to the
//   other before receiving would wait for each other forever, and NCCL makes
//   the connection between two ranks on their first message only when both
//   ask for it in matching shapes. So each (peer, direction, tag) of a group
//   gets a lane: an NCCL communicator of two ranks (the sender is its rank 0),
//   nonblocking, with a stream of its own, made when its first message is
//   posted. Every message on a lane goes in order, as MPI orders messages of
//   one source and tag; nothing else waits for it (neither other lanes nor
//   the group's collectives). Each message carries a header over the MPI
//   control plane: the first one the lane's NCCL unique id, and with
//   comm.check_ops every one its count and type, which the receiver compares
//   with its own before the data can land in the wrong place. So point to
//   point needs the MPI control plane (an MPI launcher), not a message to the
//   rank itself. A lane is one-way and has one pair of ranks, so its first
//   message connects both ends in matching shapes whatever else is in flight.
//   NCCL calls from the process's communicators are serialized by one lock;
//   lanes' calls return at once (nonblocking) and are polled.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/backends.h"
#include "comm/queued_comm.h"
#include "comm/store.h"
#include "comm/topology.h"
#include "core/error.h"
#include "core/gpu.h"

namespace parallm::comm {

namespace {

void cuda_ok(cudaError_t e, const std::string& where, const std::string& what) {
  if (e == cudaSuccess) return;
  throw CudaError(where, fmt::format("{}: {} ({}) ({})", what, cudaGetErrorString(e), cudaGetErrorName(e),
                                     gpu::context().empty() ? "this process" : gpu::context()));
}

void nccl_ok(ncclResult_t r, const std::string& where, const std::string& what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(comm);
  throw CommError(where, fmt::format("{}: NCCL error: {}{}", what, ncclGetErrorString(r),
                                     last && *last ? fmt::format(" ({})", last) : std::string()));
}

bool on_device(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an unregistered host pointer on older runtimes
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

bool reducing(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::Reduce || k == OpKind::ReduceScatter;
}

// How an operation's elements travel: NCCL's type, bytes per element, and
// whether host bf16/uint16 is widened to fp32/int32 for a reduction.
struct Wire {
  ncclDataType_t type = ncclFloat32;
  size_t esize = 4;
  bool widen = false;
};

// Set on the caller's thread by issued(): where the compute stream stood, the
// wire type, and the staging buffers of host operands (allocated before the
// event, so no block still in use by kernels queued after it is handed out).
struct Issued {
  cudaEvent_t ready = nullptr;
  Wire wire;
  gpu::DeviceBuffer sa, sb;   // device stand-ins of host operands a and b (empty: on the device already)
  std::atomic<int> stage{0};  // point to point: how far the message got (P2pStage), for a timeout's diagnosis
  WorkPtr check;              // a collective: its signature check over MPI, while in flight
  ~Issued() {
    if (ready) cudaEventDestroy(ready);
  }
};

// Every NCCL call of the process goes under this lock: NCCL forbids issuing
// to one communicator, or to communicators of one device, from several threads at once.
std::mutex& nccl_mutex() {
  static std::mutex mu;
  return mu;
}

// An NCCL group that is closed however the block is left (an open group
// would defer every later call of this thread).
class GroupGuard {
 public:
  explicit GroupGuard(const std::function<void(ncclResult_t, const char*)>& ok) : ok_(ok) {
    ok_(ncclGroupStart(), "ncclGroupStart");
  }
  void end() {
    open_ = false;
    ok_(ncclGroupEnd(), "ncclGroupEnd");
  }
  ~GroupGuard() {
    if (open_) ncclGroupEnd();
  }

 private:
  const std::function<void(ncclResult_t, const char*)>& ok_;
  bool open_ = true;
};

// Signature fields compared across ranks before a collective (int32, so
// counts travel as two halves).
constexpr int kSig = 7;
void signature(const Op& op, bool widen, int32_t* s) {
  const bool has_dtype = op.kind != OpKind::Barrier && op.kind != OpKind::Split;
  const bool rooted = op.kind == OpKind::Reduce || op.kind == OpKind::Broadcast || op.kind == OpKind::Gather ||
                      op.kind == OpKind::Scatter;
  s[0] = static_cast<int32_t>(op.seq & 0x7fffffff);
  s[1] = static_cast<int32_t>(op.kind);
  s[2] = static_cast<int32_t>(op.count >> 31);
  s[3] = static_cast<int32_t>(op.count & 0x7fffffff);
  s[4] = (has_dtype ? static_cast<int32_t>(op.dtype()) : 0) | (widen ? 0x100 : 0);
  s[5] = rooted ? op.root : 0;
  s[6] = reducing(op.kind) ? static_cast<int32_t>(op.rop) : 0;
}

std::string describe_signature(const int32_t* s) {
  Op op;
  op.seq = static_cast<uint64_t>(s[0]);
  op.kind = static_cast<OpKind>(s[1]);
  op.count = (static_cast<int64_t>(s[2]) << 31) | s[3];
  op.a = op.b = Tensor::view_of(nullptr, {0}, static_cast<DType>(s[4] & 0xff));
  op.root = s[5];
  op.rop = static_cast<ReduceOp>(s[6]);
  return op.describe() + (s[4] & 0x100 ? " from host memory, widened" : "");
}

// The completion of NCCL work queued on a stream.
class Done : public Pending {
 public:
  bool poll() override { return true; }
};

// The wire type of an operation on this rank. Host-only reductions of the
// narrow types accumulate wide, as on MPI; uint16 has no NCCL arithmetic.
Wire wire_of(const Op& op, bool a_host, bool b_host) {
  const DType dt = op.dtype();
  const bool red = reducing(op.kind);
  const bool any_dev = (op.a.numel() > 0 && !a_host) || (op.b.numel() > 0 && !b_host);
  Wire w;
  w.widen = red && !any_dev && (dt == DType::BF16 || dt == DType::U16);
  switch (dt) {
    case DType::F32:
      return {ncclFloat32, 4, false};
    case DType::I32:
      return {ncclInt32, 4, false};
    case DType::BF16:
      return w.widen ? Wire{ncclFloat32, 4, true} : Wire{ncclBfloat16, 2, false};
    case DType::U16:
      PARALLM_CHECK(
          !red || w.widen, ShapeError, fmt::format("comm.{}", op_kind_name(op.kind)),
          "{} x uint16 in device memory: NCCL has no uint16 arithmetic (reduce from host memory, or as int32)",
          op.count);
      // Unreduced: moved as 2-byte elements, bits untouched.
      return w.widen ? Wire{ncclInt32, 4, true} : Wire{ncclFloat16, 2, false};
  }
  return w;
}

class NcclComm;

class NcclPending : public Pending {
 public:
  NcclPending(NcclComm& c, Op& op);
  ~NcclPending() override;
  bool poll() override;

 private:
  void* operand(Tensor& t, bool input);  // device address of an operand (staged from the host if `input`)
  void enqueue_now();                    // enqueue() under the NCCL lock
  void enqueue();
  void copy_back();
  bool finished() const { return done_ && cudaEventQuery(done_) == cudaSuccess; }

  NcclComm& c_;
  Op& op_;
  Issued& is_;
  ncclDataType_t type_;
  size_t esize_;   // bytes per element on the wire
  WorkPtr check_;  // the signature check, polled before anything goes to NCCL
  cudaEvent_t done_ = nullptr;
};

// ---- point to point: lanes (see the top of the file) ----

// Where a message stands, for the diagnosis of a timeout.
enum P2pStage : int {
  kStageQueued,      // behind earlier messages of its lane
  kStageHeader,      // a lane's first receive: nothing from the peer yet (no matching send posted)
  kStageConnecting,  // the lane's communicator is being made: both ends must join
  kStageEnqueuing,   // NCCL is queueing it (connecting to the peer on a lane's first message)
  kStageRunning,     // on the GPU, waiting for the peer's side
  kStageDone
};

// The header of a message, int32s over the MPI control plane: fields, then
// the lane's NCCL unique id (first message only).
enum HeaderField : int { kHdrMagic, kHdrSeq, kHdrCountHi, kHdrCountLo, kHdrDtype, kHdrHasId, kHdrIndex, kHdrFields };
static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0);
constexpr int kHdrInts = kHdrFields + static_cast<int>(sizeof(ncclUniqueId) / sizeof(int32_t));
constexpr int32_t kHdrMagicValue = 0x70327031;
// Lanes per group, at most: each is an NCCL communicator (a connection, its
// buffers and a proxy thread), made for a (peer, direction, tag).
constexpr int kMaxLanes = 64;

class P2pOp;

struct Lane {
  int peer = 0, tag = 0;
  bool send = true;  // this rank sends on it (its rank 0), or receives (its rank 1)
  enum State { kNeedId, kConnecting, kReady } state = kNeedId;
  ncclComm_t comm = nullptr;  // nonblocking
  cudaStream_t stream = nullptr;
  std::deque<P2pOp*> waiting;  // posted, not yet handed to NCCL, in order
  P2pOp* enqueuing = nullptr;  // handed to NCCL, which answered ncclInProgress
  int64_t posted = 0;          // messages posted on it
  bool failed = false;         // an operation on it failed or was abandoned: abort it
  bool idle() const { return state == kReady && waiting.empty() && !enqueuing && !failed; }
};

// One send or receive on its lane.
class P2pOp : public Pending {
 public:
  P2pOp(NcclComm& c, Op& op);
  ~P2pOp() override;
  bool poll() override;
  // A lane's first receive: the NCCL unique id its header brought, once here.
  const ncclUniqueId* lane_id();
  // Hands the message to NCCL on its lane's stream; false while NCCL is still queueing it.
  bool launch();
  void enqueued();  // NCCL has queued it: its completion is recorded
  void set_stage(P2pStage s) { is_.stage.store(s, std::memory_order_relaxed); }

 private:
  bool header_here();  // a receive's header arrived (and matches, or this throws)
  void record();
  std::string where() const { return fmt::format("comm.{}", op_kind_name(op_.kind)); }

  NcclComm& c_;
  Op& op_;
  Issued& is_;
  bool send_;
  bool first_ = false;  // the first message of its lane
  Lane* lane_ = nullptr;
  int64_t index_ = 0;  // its place on the lane (0, 1, ...)
  Tensor hdr_;         // the header, sent or received over the control plane
  WorkPtr hdr_work_;   // that exchange (none: not checked and not a lane's first)
  bool hdr_ok_ = false;
  ncclUniqueId id_{};
  cudaEvent_t done_ = nullptr;
  bool finished_ = false;
};

class NcclComm : public QueuedComm {
 public:
  NcclComm(int rank, int size, std::string name, CommOptions options, ncclComm_t comm, int device,
           std::unique_ptr<Communicator> ctrl)
      : QueuedComm(rank, size, std::move(name), options), comm_(comm), device_(device), ctrl_(std::move(ctrl)) {
    cuda_ok(cudaSetDevice(device_), "comm.nccl", "cudaSetDevice");
    cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "comm.nccl", "creating the NCCL stream");
    cuda_ok(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "comm.nccl", "creating a copy stream");
    barrier_buf_ = gpu::DeviceBuffer(sizeof(float), MemCategory::Comm);
    if (ctrl_) sig_ = Tensor::empty({2 * kSig}, DType::I32, MemCategory::Comm);  // made once, not per collective
    start_thread();
  }
  ~NcclComm() override {
    stop_thread();
    // Kernels still waiting for a peer return once their communicator is
    // aborted; then their buffers can go. A lane is aborted alone when only
    // it failed or still has messages (a peer that never received them).
    const bool abort_all = broken() || !graveyard_.empty();
    for (auto& [key, l] : lanes_) {
      if (!l->comm) continue;
      if (abort_all || !l->idle()) {
        ncclCommAbort(l->comm);
      } else {
        cudaStreamSynchronize(l->stream);
        ncclCommDestroy(l->comm);
      }
    }
    for (auto& [key, l] : lanes_) {
      cudaStreamSynchronize(l->stream);  // an aborted lane's kernels have returned
      cudaStreamDestroy(l->stream);
    }
    if (abort_all) {
      ncclCommAbort(comm_);
    } else {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    graveyard_.clear();
    cudaStreamDestroy(stream_);
    cudaStreamDestroy(copy_stream_);
  }
  std::string backend() const override { return "nccl"; }
  int gpu_device() const override { return device_; }
  void abort(int code) override {
    if (ctrl_) ctrl_->abort(code);  // MPI_Abort: does not return
    std::fflush(nullptr);
    std::_Exit(code);
  }

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  cudaStream_t copy_stream() const { return copy_stream_; }
  void* barrier_buf() const { return barrier_buf_.data(); }
  std::string err(const Op& op, const std::string& what) const { return error_text(op, what); }
  // What an operation that may still run on the GPU uses (it failed or timed
  // out): kept until the communicator is aborted.
  void bury(const Op& op) {
    std::lock_guard<std::mutex> lock(grave_mu_);
    graveyard_.push_back({op.ext, op.a, op.b});
  }

  // ---- the collectives' signature check (over MPI; NcclPending polls it) ----
  bool checks() const { return ctrl_ && options().check_ops; }
  // Starts comparing this collective's signature across the ranks.
  WorkPtr post_signature(const Op& op) {
    int32_t* p = sig_.data<int32_t>();
    const bool widen = op.ext && static_cast<const Issued*>(op.ext.get())->wire.widen;
    signature(op, widen, p);
    for (int i = 0; i < kSig; ++i) p[kSig + i] = -p[i];
    return ctrl_->all_reduce_async(sig_, ReduceOp::Max);
  }
  // After the check: every rank's signature of this collective must match.
  void check_agreement(const Op& op) {
    const int32_t* p = sig_.data<int32_t>();
    const bool widen = op.ext && static_cast<const Issued*>(op.ext.get())->wire.widen;
    bool agree = true;
    for (int i = 0; i < kSig; ++i) agree &= p[i] == -p[kSig + i];
    if (agree) return;
    Tensor mine = Tensor::empty({kSig}, DType::I32), all = Tensor::empty({kSig * size()}, DType::I32);
    signature(op, widen, mine.data<int32_t>());
    // Every rank's signature in rank order (shard_of gives each rank kSig of them).
    ctrl_->all_gather(mine, all);
    std::map<std::string, std::vector<int>> by;
    for (int r = 0; r < size(); ++r) by[describe_signature(all.data<int32_t>() + r * kSig)].push_back(r);
    std::string s_all;
    for (const auto& [what, ranks] : by)
      s_all += fmt::format("{}{} {} called {}", s_all.empty() ? "" : "; ", ranks.size() == 1 ? "rank" : "ranks",
                           fmt::join(ranks, ","), what);
    throw CommError(fmt::format("comm.{}", op_kind_name(op.kind)),
                    error_text(op, "collective mismatch (a rank skipped or reordered a collective): " + s_all));
  }

  // ---- lanes (communication thread only) ----
  Communicator& ctrl() const { return *ctrl_; }
  // The lane of a send or receive, made (without its communicator) if new.
  Lane& lane_for(const Op& op, bool* is_new) {
    const bool send = op.kind == OpKind::Send;
    const auto key = std::make_tuple(op.root, send, op.tag);
    auto it = lanes_.find(key);
    *is_new = it == lanes_.end();
    if (!*is_new) return *it->second;
    auto l = std::make_unique<Lane>();
    l->peer = op.root;
    l->tag = op.tag;
    l->send = send;
    cuda_ok(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking), fmt::format("comm.{}", op_kind_name(op.kind)),
            error_text(op, "creating a stream for its lane"));
    Lane& ref = *l;
    lanes_.emplace(key, std::move(l));
    return ref;
  }
  // Starts making the lane's communicator (nonblocking: progress() polls it).
  void connect(Lane& l, const ncclUniqueId& id, const Op& op) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // NCCL calls return at once; each is polled until done
    std::lock_guard<std::mutex> lock(nccl_mutex());
    const ncclResult_t r = ncclCommInitRankConfig(&l.comm, 2, id, l.send ? 0 : 1, &config);
    if (r != ncclInProgress)
      nccl_ok(r, fmt::format("comm.{}", op_kind_name(op.kind)),
              error_text(op, fmt::format("connecting to rank {} (ncclCommInitRankConfig of its lane)", l.peer)),
              l.comm);
    l.state = Lane::kConnecting;
    for (P2pOp* p : l.waiting) p->set_stage(kStageConnecting);
  }
  // Moves the lane on: connects it, and hands its waiting messages to NCCL in
  // order (one NCCL call in progress at a time, as a nonblocking communicator
  // requires). Errors name `op`, the message being polled.
  void progress(Lane& l, const Op& op) {
    if (l.state == Lane::kNeedId) {
      const ncclUniqueId* id = l.waiting.empty() ? nullptr : l.waiting.front()->lane_id();
      if (!id) return;
      connect(l, *id, op);
    }
    if (l.state == Lane::kConnecting) {
      if (lane_busy(l, op, "connecting")) return;
      l.state = Lane::kReady;
    }
    if (l.enqueuing) {
      if (lane_busy(l, op, "queueing a message")) return;
      P2pOp* p = l.enqueuing;
      l.enqueuing = nullptr;
      p->enqueued();
    }
    while (!l.waiting.empty()) {
      P2pOp* p = l.waiting.front();
      l.waiting.pop_front();
      if (!p->launch()) {
        l.enqueuing = p;
        break;
      }
    }
    for (P2pOp* p : l.waiting) p->set_stage(kStageQueued);
  }
  // True while NCCL is still working on the lane's last call; throws its error.
  bool lane_busy(Lane& l, const Op& op, const char* what) {
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(nccl_mutex());
      nccl_ok(ncclCommGetAsyncError(l.comm, &state), fmt::format("comm.{}", op_kind_name(op.kind)),
              error_text(op, "ncclCommGetAsyncError"), l.comm);
    }
    if (state == ncclInProgress) return true;
    nccl_ok(state, fmt::format("comm.{}", op_kind_name(op.kind)),
            error_text(
                op, fmt::format("{} on the lane {} rank {} with tag {}", what, l.send ? "to" : "from", l.peer, l.tag)),
            l.comm);
    return false;
  }

 protected:
  bool host_only() const override { return false; }
  void thread_started() override { cudaSetDevice(device_); }

  void issued(Op& op) override {
    const std::string where = fmt::format("comm.{}", op_kind_name(op.kind));
    if (op.kind == OpKind::Split) return;
    if (!op.collective()) check_p2p(op, where);
    int cur = -1;
    cudaGetDevice(&cur);
    PARALLM_CHECK(
        cur == device_, CommError, where, "{}",
        error_text(op, fmt::format("issued from a thread on GPU {}; this group runs on GPU {}", cur, device_)));
    auto is = std::make_shared<Issued>();
    const bool a_host = op.a.numel() > 0 && !on_device(op.a.raw());
    const bool b_host = op.b.numel() > 0 && !on_device(op.b.raw());
    is->wire = wire_of(op, a_host, b_host);
    if (a_host) is->sa = gpu::DeviceBuffer(static_cast<size_t>(op.a.numel()) * is->wire.esize, MemCategory::Comm);
    if (b_host) is->sb = gpu::DeviceBuffer(static_cast<size_t>(op.b.numel()) * is->wire.esize, MemCategory::Comm);
    // Where the caller's GPU work stands now: the operation waits for that, not for later work.
    cuda_ok(cudaEventCreateWithFlags(&is->ready, cudaEventDisableTiming), where, "creating an event");
    cuda_ok(cudaEventRecord(is->ready, static_cast<cudaStream_t>(gpu::stream())), where, "marking the compute stream");
    op.ext = std::move(is);
  }

  // A collective's signature check is polled (NcclPending), so this thread
  // keeps moving messages meanwhile: a peer may need one before it gets to
  // the collective. A split waits for its check.
  std::unique_ptr<Pending> start(Op& op) override {
    if (!op.collective()) return std::make_unique<P2pOp>(*this, op);
    if (op.kind == OpKind::Split) {
      if (checks()) {
        post_signature(op)->wait();
        check_agreement(op);
      }
      split_now(op);
      return std::make_unique<Done>();
    }
    return std::make_unique<NcclPending>(*this, op);
  }

  // A send or receive that timed out: how far it got, naming the peer. (On
  // the communication thread; the waiter's watchdog passes no operation state.)
  std::string diagnose(const Op& op) override {
    if (!op.ext) return "";
    if (op.collective()) return check_diagnosis(*static_cast<const Issued*>(op.ext.get()));
    const bool send = op.kind == OpKind::Send;
    const int peer = op.root;
    switch (static_cast<const Issued*>(op.ext.get())->stage.load(std::memory_order_relaxed)) {
      case kStageQueued:
        return fmt::format("queued behind earlier messages {} rank {} with tag {}, which have not completed",
                           send ? "to" : "from", peer, op.tag);
      case kStageHeader:
        return fmt::format("rank {} has sent nothing with tag {} to this rank (no matching send posted)", peer, op.tag);
      case kStageConnecting:
        return send ? fmt::format(
                          "rank {} never joined the connection for messages with tag {} (no matching receive "
                          "posted on rank {})",
                          peer, op.tag, peer)
                    : fmt::format("rank {} posted the send but NCCL did not finish connecting the two ranks", peer);
      case kStageEnqueuing:
        return fmt::format(
            "NCCL is still connecting this rank with rank {} (its matching {} is not posted, or it is "
            "stuck)",
            peer, send ? "receive" : "send");
      case kStageRunning:
        return send ? fmt::format(
                          "the message is on the GPU, waiting for rank {} to receive it (no matching receive "
                          "posted on rank {}, or it is stuck)",
                          peer, peer)
                    : fmt::format(
                          "the receive is on the GPU, waiting for rank {}'s data (no matching send posted on "
                          "rank {}, or it is stuck)",
                          peer, peer);
      default:
        return "";
    }
  }

 private:
  // Point to point as it is issued: a peer other than this rank, the control
  // plane that carries the headers, and a bounded number of lanes.
  void check_p2p(const Op& op, const std::string& where) {
    PARALLM_CHECK(op.root != rank(), CommError, where, "{}",
                  error_text(op, "a message to this rank itself: the nccl backend exchanges messages between ranks"));
    PARALLM_CHECK(ctrl_, CommError, where, "{}",
                  error_text(op,
                             "point-to-point messages on the nccl backend need the MPI control plane (start the "
                             "ranks with an MPI launcher, not through PARALLM_STORE_DIR)"));
    std::lock_guard<std::mutex> lock(lane_keys_mu_);
    const auto key = std::make_tuple(op.root, op.kind == OpKind::Send, op.tag);
    if (lane_keys_.count(key)) return;
    PARALLM_CHECK(static_cast<int>(lane_keys_.size()) < kMaxLanes, CommError, where, "{}",
                  error_text(op, fmt::format("more than {} lanes (peer, direction, tag) in this group: each is an "
                                             "NCCL communicator of its own; use a few tags (one per kind of "
                                             "message), not one per message",
                                             kMaxLanes)));
    lane_keys_.insert(key);
  }

  // A collective that timed out in its signature check: the control plane's
  // own timeout comes moments later and says what the peers are doing.
  std::string check_diagnosis(const Issued& is) {
    if (!is.check) return "";
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(diagnose_budget_s() + 1.0);
    try {
      while (!is.check->test()) {
        if (std::chrono::steady_clock::now() > until) return "the ranks' signature check over MPI is still waiting";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    } catch (const std::exception& e) {
      return fmt::format("the ranks' signature check over MPI: {}", e.what());
    }
    return "";
  }

  void split_now(Op& op) {
    std::unique_ptr<Communicator> sub_ctrl;
    if (ctrl_) sub_ctrl = ctrl_->split(op.color, op.key, op.name);
    ncclComm_t nc = nullptr;
    nccl_ok(ncclCommSplit(comm_, op.color < 0 ? NCCL_SPLIT_NOCOLOR : op.color, op.key, &nc, nullptr), "comm.split",
            error_text(op, "ncclCommSplit"), comm_);
    if (op.color < 0 || !nc) {
      *op.split_out = nullptr;
      return;
    }
    int r = 0, n = 0;
    nccl_ok(ncclCommUserRank(nc, &r), "comm.split", "ncclCommUserRank", nc);
    nccl_ok(ncclCommCount(nc, &n), "comm.split", "ncclCommCount", nc);
    *op.split_out = std::make_unique<NcclComm>(r, n, op.name, options(), nc, device_, std::move(sub_ctrl));
  }

  struct Buried {
    std::shared_ptr<void> ext;
    Tensor a, b;
  };
  ncclComm_t comm_;
  int device_;
  std::unique_ptr<Communicator> ctrl_;
  cudaStream_t stream_ = nullptr, copy_stream_ = nullptr;
  gpu::DeviceBuffer barrier_buf_;
  Tensor sig_;  // this rank's signature and its negation, compared over ctrl_
  std::mutex grave_mu_;
  std::vector<Buried> graveyard_;
  std::map<std::tuple<int, bool, int>, std::unique_ptr<Lane>> lanes_;  // (peer, send, tag): comm thread only
  std::mutex lane_keys_mu_;
  std::set<std::tuple<int, bool, int>> lane_keys_;  // the lanes issued so far (any thread)
};

// ---- one operation ----

NcclPending::NcclPending(NcclComm& c, Op& op)
    : c_(c), op_(op), is_(*static_cast<Issued*>(op.ext.get())), type_(is_.wire.type), esize_(is_.wire.esize) {
  if (c_.checks()) {
    check_ = c_.post_signature(op_);
    is_.check = check_;
    return;
  }
  enqueue_now();
}

void NcclPending::enqueue_now() {
  try {
    std::lock_guard<std::mutex> lock(nccl_mutex());
    enqueue();
  } catch (...) {
    c_.bury(op_);  // some of it may be queued on the GPU already
    throw;
  }
}

NcclPending::~NcclPending() {
  if (!finished()) c_.bury(op_);
  if (done_) cudaEventDestroy(done_);
}

// The device address NCCL uses for `t`: its own, or its staging buffer, filled
// from the host now when `input` (and read back by copy_back()).
void* NcclPending::operand(Tensor& t, bool input) {
  if (t.numel() == 0) return nullptr;
  gpu::DeviceBuffer& dev = &t == &op_.a ? is_.sa : is_.sb;
  if (!dev.data()) return t.raw();  // device memory
  if (!input) return dev.data();
  const void* src = t.raw();
  const int64_t n = t.numel();
  std::vector<float> f;
  std::vector<int32_t> i;
  if (is_.wire.widen && t.dtype() == DType::BF16) {
    f.resize(n);
    const auto* p = static_cast<const uint16_t*>(t.raw());
    for (int64_t k = 0; k < n; ++k) f[k] = bf16_to_f32(p[k]);
    src = f.data();
  } else if (is_.wire.widen) {
    i.resize(n);
    const auto* p = static_cast<const uint16_t*>(t.raw());
    for (int64_t k = 0; k < n; ++k) i[k] = p[k];
    src = i.data();
  }
  // From pageable memory the call returns once the source has been read (it
  // may first wait for the stream to reach this point).
  cuda_ok(cudaMemcpyAsync(dev.data(), src, dev.bytes(), cudaMemcpyHostToDevice, c_.stream()),
          fmt::format("comm.{}", op_kind_name(op_.kind)), c_.err(op_, "staging a host tensor"));
  return dev.data();
}

void NcclPending::enqueue() {
  const std::string where = fmt::format("comm.{}", op_kind_name(op_.kind));
  const std::function<void(ncclResult_t, const char*)> ok = [&](ncclResult_t r, const char* what) {
    nccl_ok(r, where, c_.err(op_, what), c_.comm());
  };
  cudaStream_t st = c_.stream();
  cuda_ok(cudaStreamWaitEvent(st, is_.ready, 0), where, c_.err(op_, "waiting for the compute stream"));
  const int n = c_.size(), me = c_.rank();
  auto at = [&](void* base, int64_t elems) { return static_cast<void*>(static_cast<char*>(base) + elems * esize_); };
  auto d2d = [&](void* dst, const void* src, int64_t elems) {
    if (elems > 0 && dst != src)
      cuda_ok(cudaMemcpyAsync(dst, src, static_cast<size_t>(elems) * esize_, cudaMemcpyDeviceToDevice, st), where,
              c_.err(op_, "copying this rank's part"));
  };
  const auto cnt = static_cast<size_t>(op_.count);
  const ncclRedOp_t rop = nccl_op(op_.rop);
  ncclComm_t comm = c_.comm();
  switch (op_.kind) {
    case OpKind::AllReduce: {
      void* a = operand(op_.a, true);
      if (cnt) ok(ncclAllReduce(a, a, cnt, type_, rop, comm, st), "ncclAllReduce");
      break;
    }
    case OpKind::Reduce: {
      void* a = operand(op_.a, true);
      if (cnt) ok(ncclReduce(a, a, cnt, type_, rop, op_.root, comm, st), "ncclReduce");
      break;
    }
    case OpKind::Broadcast: {
      void* a = operand(op_.a, me == op_.root);
      if (cnt) ok(ncclBroadcast(a, a, cnt, type_, op_.root, comm, st), "ncclBroadcast");
      break;
    }
    case OpKind::AllGather: {
      // In place when `in` is this rank's part of `out`: then it lives in out's staging too.
      const Shard mine = shard_of(op_.count, n, me);
      const bool in_place =
          op_.a.numel() == 0 ||
          static_cast<char*>(op_.a.raw()) == static_cast<char*>(op_.b.raw()) + mine.offset * dtype_size(op_.b.dtype());
      void* out = operand(op_.b, in_place);
      void* in = in_place ? at(out, mine.offset) : operand(op_.a, true);
      if (op_.count % n == 0) {
        if (cnt) ok(ncclAllGather(in, out, cnt / n, type_, comm, st), "ncclAllGather");
        break;
      }
      d2d(at(out, mine.offset), in, mine.count);
      GroupGuard group(ok);
      for (int r = 0; r < n; ++r) {
        const Shard s = shard_of(op_.count, n, r);
        if (s.count)
          ok(ncclBroadcast(at(out, s.offset), at(out, s.offset), s.count, type_, r, comm, st), "ncclBroadcast");
      }
      group.end();
      break;
    }
    case OpKind::ReduceScatter: {
      void* in = operand(op_.a, true);
      void* out = operand(op_.b, false);
      if (op_.count % n == 0) {
        if (cnt) ok(ncclReduceScatter(in, out, cnt / n, type_, rop, comm, st), "ncclReduceScatter");
        break;
      }
      GroupGuard group(ok);
      for (int r = 0; r < n; ++r) {
        const Shard s = shard_of(op_.count, n, r);
        if (s.count)
          ok(ncclReduce(at(in, s.offset), r == me ? out : at(in, s.offset), s.count, type_, rop, r, comm, st),
             "ncclReduce");
      }
      group.end();
      break;
    }
    case OpKind::Gather: {
      const bool root = me == op_.root;
      void* in = operand(op_.a, true);
      void* out = root ? operand(op_.b, false) : nullptr;
      const Shard mine = shard_of(op_.count, n, me);
      if (root) d2d(at(out, mine.offset), in, mine.count);
      GroupGuard group(ok);
      if (root) {
        for (int r = 0; r < n; ++r) {
          const Shard s = shard_of(op_.count, n, r);
          if (r != me && s.count) ok(ncclRecv(at(out, s.offset), s.count, type_, r, comm, st), "ncclRecv");
        }
      } else if (mine.count) {
        ok(ncclSend(in, mine.count, type_, op_.root, comm, st), "ncclSend");
      }
      group.end();
      break;
    }
    case OpKind::Scatter: {
      const bool root = me == op_.root;
      void* in = root ? operand(op_.a, true) : nullptr;
      void* out = operand(op_.b, false);
      const Shard mine = shard_of(op_.count, n, me);
      if (root) d2d(out, at(in, mine.offset), mine.count);
      GroupGuard group(ok);
      if (root) {
        for (int r = 0; r < n; ++r) {
          const Shard s = shard_of(op_.count, n, r);
          if (r != me && s.count) ok(ncclSend(at(in, s.offset), s.count, type_, r, comm, st), "ncclSend");
        }
      } else if (mine.count) {
        ok(ncclRecv(out, mine.count, type_, op_.root, comm, st), "ncclRecv");
      }
      group.end();
      break;
    }
    case OpKind::AllToAll: {
      void* in = operand(op_.a, true);
      void* out = operand(op_.b, false);
      const int64_t block = op_.count / n;
      if (!block) break;
      d2d(at(out, me * block), at(in, me * block), block);
      GroupGuard group(ok);
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        ok(ncclSend(at(in, r * block), block, type_, r, comm, st), "ncclSend");
        ok(ncclRecv(at(out, r * block), block, type_, r, comm, st), "ncclRecv");
      }
      group.end();
      break;
    }
    case OpKind::Barrier:
      ok(ncclAllReduce(c_.barrier_buf(), c_.barrier_buf(), 1, ncclFloat32, ncclSum, comm, st), "ncclAllReduce");
      break;
    default:  // split runs on the host; point to point on lanes (P2pOp)
      throw InternalError(where, c_.err(op_, "not an operation for the NCCL stream"));
  }
  cuda_ok(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), where, c_.err(op_, "creating an event"));
  cuda_ok(cudaEventRecord(done_, st), where, c_.err(op_, "recording completion"));
}

bool NcclPending::poll() {
  if (check_) {
    if (!check_->test()) return false;  // rethrows a failure of the control plane
    check_.reset();
    is_.check.reset();
    c_.check_agreement(op_);  // throws on a mismatch
    enqueue_now();
  }
  const cudaError_t e = cudaEventQuery(done_);
  const std::string where = fmt::format("comm.{}", op_kind_name(op_.kind));
  if (e == cudaErrorNotReady) {
    ncclResult_t async = ncclSuccess;
    nccl_ok(ncclCommGetAsyncError(c_.comm(), &async), where, c_.err(op_, "ncclCommGetAsyncError"), c_.comm());
    nccl_ok(async, where, c_.err(op_, "NCCL failed asynchronously"), c_.comm());
    return false;
  }
  cuda_ok(e, where, c_.err(op_, "completion"));
  copy_back();
  return true;
}

// Results for host tensors: down from the staging buffers once the stream has
// passed the operation (a stream of its own, so later queued work is not waited for).
void NcclPending::copy_back() {
  const bool root = c_.rank() == op_.root;
  const bool a_out =
      op_.kind == OpKind::AllReduce || (op_.kind == OpKind::Reduce && root) || (op_.kind == OpKind::Broadcast && !root);
  const bool b_out = op_.kind == OpKind::AllGather || op_.kind == OpKind::ReduceScatter ||
                     (op_.kind == OpKind::Gather && root) || op_.kind == OpKind::Scatter ||
                     op_.kind == OpKind::AllToAll;
  const std::string where = fmt::format("comm.{}", op_kind_name(op_.kind));
  for (auto [t, dev] : {std::pair<Tensor*, gpu::DeviceBuffer*>{a_out ? &op_.a : nullptr, &is_.sa},
                        std::pair<Tensor*, gpu::DeviceBuffer*>{b_out ? &op_.b : nullptr, &is_.sb}}) {
    if (!t || !dev->data()) continue;
    const bool widen = is_.wire.widen;
    std::vector<char> wide(widen ? dev->bytes() : 0);
    void* dst = widen ? static_cast<void*>(wide.data()) : t->raw();
    cuda_ok(cudaMemcpyAsync(dst, dev->data(), dev->bytes(), cudaMemcpyDeviceToHost, c_.copy_stream()), where,
            c_.err(op_, "copying the result to the host"));
    cuda_ok(cudaStreamSynchronize(c_.copy_stream()), where, c_.err(op_, "copying the result to the host"));
    if (!widen) continue;
    auto* out = static_cast<uint16_t*>(t->raw());
    const int64_t n = t->numel();
    if (t->dtype() == DType::BF16) {
      const auto* f = reinterpret_cast<const float*>(wide.data());
      for (int64_t k = 0; k < n; ++k) out[k] = f32_to_bf16(f[k]);
    } else {
      const auto* v = reinterpret_cast<const int32_t*>(wide.data());
      for (int64_t k = 0; k < n; ++k) out[k] = static_cast<uint16_t>(v[k]);
    }
  }
}

// ---- one send or receive ----

P2pOp::P2pOp(NcclComm& c, Op& op)
    : c_(c), op_(op), is_(*static_cast<Issued*>(op.ext.get())), send_(op.kind == OpKind::Send) {
  lane_ = &c.lane_for(op, &first_);
  index_ = lane_->posted;
  const bool check = c.options().check_ops;
  hdr_ = Tensor::empty({kHdrInts}, DType::I32, MemCategory::Comm);
  int32_t* h = hdr_.data<int32_t>();
  std::memset(h, 0, hdr_.nbytes());
  if (send_) {
    h[kHdrMagic] = kHdrMagicValue;
    h[kHdrSeq] = static_cast<int32_t>(op.seq & 0x7fffffff);
    h[kHdrCountHi] = static_cast<int32_t>(op.count >> 31);
    h[kHdrCountLo] = static_cast<int32_t>(op.count & 0x7fffffff);
    h[kHdrDtype] = static_cast<int32_t>(op.a.dtype());
    h[kHdrIndex] = static_cast<int32_t>(index_ & 0x7fffffff);
    if (first_) {
      ncclUniqueId id{};
      {
        std::lock_guard<std::mutex> lock(nccl_mutex());
        nccl_ok(ncclGetUniqueId(&id), where(), c.err(op, "ncclGetUniqueId for its lane"));
      }
      h[kHdrHasId] = 1;
      std::memcpy(h + kHdrFields, id.internal, sizeof(id.internal));
      c.connect(*lane_, id, op);
    }
    if (first_ || check) hdr_work_ = c.ctrl().send_async(hdr_, op.root, op.tag);
  } else if (first_ || check) {
    hdr_work_ = c.ctrl().recv_async(hdr_, op.root, op.tag);
  }
  ++lane_->posted;
  lane_->waiting.push_back(this);
  set_stage(!send_ && first_ ? kStageHeader : lane_->state == Lane::kConnecting ? kStageConnecting : kStageQueued);
}

// An operation that did not finish (a failure or a timeout broke the group)
// may still run on the GPU: its lane is aborted with the group, and its
// buffers are kept until then.
P2pOp::~P2pOp() {
  auto& w = lane_->waiting;
  w.erase(std::remove(w.begin(), w.end(), this), w.end());
  if (lane_->enqueuing == this) lane_->enqueuing = nullptr;
  if (!finished_) {
    lane_->failed = true;
    c_.bury(op_);
  }
  if (done_) cudaEventDestroy(done_);
}

// The sender's header for this receive, once it is here: it must describe
// the message this rank expects (the lane's order is the sender's order).
bool P2pOp::header_here() {
  if (hdr_ok_) return true;
  if (!hdr_work_->test()) return false;  // rethrows a failure of the control plane
  const int32_t* h = hdr_.data<int32_t>();
  PARALLM_CHECK(h[kHdrMagic] == kHdrMagicValue, InternalError, where(), "{}",
                c_.err(op_, fmt::format("rank {} sent a header that is not parallm's", op_.root)));
  const int64_t count = (static_cast<int64_t>(h[kHdrCountHi]) << 31) | h[kHdrCountLo];
  const int dt = h[kHdrDtype];
  const bool known = dt >= 0 && dt <= static_cast<int>(DType::U16);
  if (count != op_.count || !known || static_cast<DType>(dt) != op_.a.dtype())
    throw CommError(where(), c_.err(op_, fmt::format("rank {} sent {} x {} as its send #{} (its message {} with tag "
                                                     "{} to this rank): a message must be received with the count "
                                                     "and type it was sent with, and messages with one tag in the "
                                                     "order they were sent",
                                                     op_.root, count, known ? dtype_name(static_cast<DType>(dt)) : "?",
                                                     h[kHdrSeq], h[kHdrIndex], op_.tag)));
  if (first_) {
    PARALLM_CHECK(h[kHdrHasId] == 1, InternalError, where(), "{}",
                  c_.err(op_, fmt::format("the first message from rank {} carries no NCCL id", op_.root)));
    std::memcpy(id_.internal, h + kHdrFields, sizeof(id_.internal));
  }
  hdr_ok_ = true;
  return true;
}

const ncclUniqueId* P2pOp::lane_id() {
  if (!first_ || send_ || !hdr_work_) return nullptr;
  return header_here() ? &id_ : nullptr;
}

bool P2pOp::launch() {
  set_stage(kStageEnqueuing);
  const auto count = static_cast<size_t>(op_.count);
  cudaStream_t st = lane_->stream;
  std::lock_guard<std::mutex> lock(nccl_mutex());
  cuda_ok(cudaStreamWaitEvent(st, is_.ready, 0), where(), c_.err(op_, "waiting for the compute stream"));
  void* buf = is_.sa.data() ? is_.sa.data() : op_.a.raw();
  if (send_ && is_.sa.data())
    // From pageable memory the call returns once the source has been read.
    cuda_ok(cudaMemcpyAsync(is_.sa.data(), op_.a.raw(), is_.sa.bytes(), cudaMemcpyHostToDevice, st), where(),
            c_.err(op_, "staging a host tensor"));
  if (count) {
    const ncclResult_t r = send_ ? ncclSend(buf, count, is_.wire.type, 1, lane_->comm, st)
                                 : ncclRecv(buf, count, is_.wire.type, 0, lane_->comm, st);
    if (r == ncclInProgress) return false;
    nccl_ok(r, where(), c_.err(op_, send_ ? "ncclSend" : "ncclRecv"), lane_->comm);
  }
  record();
  return true;
}

void P2pOp::enqueued() {
  record();
}

void P2pOp::record() {
  cuda_ok(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), where(), c_.err(op_, "creating an event"));
  cuda_ok(cudaEventRecord(done_, lane_->stream), where(), c_.err(op_, "recording completion"));
  set_stage(kStageRunning);
}

bool P2pOp::poll() {
  if (finished_) return true;
  // A mismatch is an error as soon as the header is here, before the data
  // (which could wait forever for elements that never come).
  if (!send_ && hdr_work_) header_here();
  c_.progress(*lane_, op_);
  if (!done_) return false;
  const cudaError_t e = cudaEventQuery(done_);
  if (e == cudaErrorNotReady) {
    c_.lane_busy(*lane_, op_, "waiting for the message");  // throws NCCL's asynchronous errors
    return false;
  }
  cuda_ok(e, where(), c_.err(op_, "completion"));
  if (hdr_work_ && !(send_ ? hdr_work_->test() : hdr_ok_)) return false;  // the header's exchange too
  if (!send_ && is_.sa.data()) {
    // A host tensor: down from its staging buffer (the copy stream, so nothing queued later is waited for).
    cuda_ok(cudaMemcpyAsync(op_.a.raw(), is_.sa.data(), is_.sa.bytes(), cudaMemcpyDeviceToHost, c_.copy_stream()),
            where(), c_.err(op_, "copying the message to the host"));
    cuda_ok(cudaStreamSynchronize(c_.copy_stream()), where(), c_.err(op_, "copying the message to the host"));
  }
  finished_ = true;
  set_stage(kStageDone);
  return true;
}

// The NCCL unique id as text (for the file store) and back.
std::string to_hex(const ncclUniqueId& id) {
  std::string s;
  for (char c : id.internal) s += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return s;
}

ncclUniqueId from_hex(const std::string& s, const std::string& path) {
  ncclUniqueId id{};
  PARALLM_CHECK(s.size() == 2 * sizeof(id.internal), CommError, "comm.nccl",
                "{} holds {} characters, not an NCCL unique id ({} hex digits)", path, s.size(),
                2 * sizeof(id.internal));
  for (size_t i = 0; i < sizeof(id.internal); ++i)
    id.internal[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return id;
}

}  // namespace

bool nccl_built() {
  return true;
}

std::string nccl_library_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9 (major * 1000 + ... before).
  return v >= 10000 ? fmt::format("NCCL {}.{}.{}", v / 10000, v / 100 % 100, v % 100)
                    : fmt::format("NCCL {}.{}.{}", v / 1000, v / 100 % 10, v % 100);
}

std::unique_ptr<Communicator> make_nccl_world(const CommOptions& options) {
  const int ndev = gpu::device_count();
  PARALLM_CHECK(ndev > 0, CommError, "comm.nccl", "comm.backend=nccl needs a GPU, and this process sees none");
  const EnvRank er = env_rank();
  std::unique_ptr<FileStore> store = FileStore::from_env();
  std::unique_ptr<Communicator> ctrl;
  int rank = 0, size = 1, local = 0;
  if (!store && launched_multi_rank() && !mpi_library_version().empty()) {
    CommOptions co = options;
    co.check_ops = false;  // the control plane checks the NCCL operations, not its own
    ctrl = make_mpi_world(co);
    rank = ctrl->rank();
    size = ctrl->size();
    local = discover_topology(*ctrl).me(rank).local_rank;
  } else if (er.size > 1) {
    PARALLM_CHECK(store, ConfigError, "comm.nccl",
                  "{} ranks (from {}) and no way to pass NCCL's unique id: build parallm with MPI and start it with an "
                  "MPI launcher, or set PARALLM_STORE_DIR to a directory every rank can read",
                  er.size, er.source);
    rank = er.rank;
    size = er.size;
    PARALLM_CHECK(er.local_rank >= 0 || ndev == 1, ConfigError, "comm.nccl",
                  "the launcher gives no local rank (LOCAL_RANK) to choose one of {} GPUs by", ndev);
    local = std::max(er.local_rank, 0);
  }
  const int device = local % ndev;
  gpu::set_device(device);
  ncclUniqueId id{};
  if (rank == 0) nccl_ok(ncclGetUniqueId(&id), "comm.nccl", "ncclGetUniqueId");
  if (ctrl) {
    static_assert(sizeof(id.internal) % 2 == 0);
    ctrl->broadcast(Tensor::view_of(id.internal, {static_cast<int64_t>(sizeof(id.internal) / 2)}, DType::U16), 0);
  } else if (store) {
    if (rank == 0)
      store->set("nccl-world", to_hex(id));
    else
      id = from_hex(store->get("nccl-world", options.timeout_s), store->path("nccl-world"));
  }
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;  // whatever NCCL_COMM_BLOCKING says: calls return when they are done
  nccl_ok(ncclCommInitRankConfig(&comm, size, id, rank, &config), "comm.nccl",
          fmt::format("ncclCommInitRank (rank {}/{}, GPU {})", rank, size, device));
  // Every rank has joined, so the id file can go (the store removes it as it closes).
  return std::make_unique<NcclComm>(rank, size, "world", options, comm, device, std::move(ctrl));
}

}  // namespace parallm::comm
