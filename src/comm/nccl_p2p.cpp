// The nccl backend's point to point (design: nccl_comm.h): lanes and the
// sends and receives on them.
// NCCL pairs a send with its peer's receives on the same communicator in the
// order posted, and an unpaired send (or receive) holds its stream until the
// peer's match runs: two ranks that each send to the other before receiving
// would wait for each other forever, and NCCL makes the connection between two
// ranks on their first message only when both ask for it in matching shapes.
// So each (peer, direction, tag) of a group gets a lane: an NCCL communicator
// of two ranks (the sender is its rank 0), nonblocking, with a stream of its
// own, made when its first message is posted. Every message on a lane goes in
// order, as MPI orders messages of one source and tag; nothing else waits for
// it (neither other lanes nor the group's collectives). Each message carries a
// header over the MPI control plane: the first one the lane's NCCL unique id,
// and with comm.check_ops every one its count and type, which the receiver
// compares with its own before the data can land in the wrong place. So point
// to point needs the MPI control plane (an MPI launcher), not a message to the
// rank itself. A lane is one-way and has one pair of ranks, so its first
// message connects both ends in matching shapes whatever else is in flight.
// Lanes' NCCL calls return at once (nonblocking) and are polled.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "comm/nccl_comm.h"
#include "core/error.h"

namespace parallm::comm::nccl_detail {

namespace {

// The header of a message, int32s over the MPI control plane: fields, then
// the lane's NCCL unique id (first message only).
enum HeaderField : int { kHdrMagic, kHdrSeq, kHdrCountHi, kHdrCountLo, kHdrDtype, kHdrHasId, kHdrIndex, kHdrFields };
static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0);
constexpr int kHdrInts = kHdrFields + static_cast<int>(sizeof(ncclUniqueId) / sizeof(int32_t));
constexpr int32_t kHdrMagicValue = 0x70327031;
// Lanes per group, at most: each is an NCCL communicator (a connection, its
// buffers and a proxy thread), made for a (peer, direction, tag).
constexpr int kMaxLanes = 64;

}  // namespace

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

std::unique_ptr<Pending> start_p2p(NcclComm& c, Op& op) {
  return std::make_unique<P2pOp>(c, op);
}

// ---- lanes ----

Lane& NcclComm::lane_for(const Op& op, bool* is_new) {
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

void NcclComm::connect(Lane& l, const ncclUniqueId& id, const Op& op) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // NCCL calls return at once; each is polled until done
  std::lock_guard<std::mutex> lock(nccl_mutex());
  const ncclResult_t r = ncclCommInitRankConfig(&l.comm, 2, id, l.send ? 0 : 1, &config);
  if (r != ncclInProgress)
    nccl_ok(r, fmt::format("comm.{}", op_kind_name(op.kind)),
            error_text(op, fmt::format("connecting to rank {} (ncclCommInitRankConfig of its lane)", l.peer)), l.comm);
  l.state = Lane::kConnecting;
  for (P2pOp* p : l.waiting) p->set_stage(kStageConnecting);
}

void NcclComm::progress(Lane& l, const Op& op) {
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

bool NcclComm::lane_busy(Lane& l, const Op& op, const char* what) {
  ncclResult_t state = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(nccl_mutex());
    nccl_ok(ncclCommGetAsyncError(l.comm, &state), fmt::format("comm.{}", op_kind_name(op.kind)),
            error_text(op, "ncclCommGetAsyncError"), l.comm);
  }
  if (state == ncclInProgress) return true;
  nccl_ok(
      state, fmt::format("comm.{}", op_kind_name(op.kind)),
      error_text(op, fmt::format("{} on the lane {} rank {} with tag {}", what, l.send ? "to" : "from", l.peer, l.tag)),
      l.comm);
  return false;
}

void NcclComm::check_p2p(const Op& op, const std::string& where) {
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

std::string NcclComm::diagnose_p2p(const Op& op) const {
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

}  // namespace parallm::comm::nccl_detail
