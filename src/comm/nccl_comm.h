// The "nccl" backend (internal to comm/, CUDA + NCCL builds only): collectives
// between GPUs through NCCL, behind the same Communicator as the CPU backends,
// so DDP overlaps its all-reduces with the backward pass on the GPU exactly as
// it does on the CPU. This header is what its files share:
//   nccl_comm.cpp         the communicator: issuing, starting, splitting, teardown
//   nccl_collectives.cpp  collectives on the group's stream, and their signature check
//   nccl_p2p.cpp          point to point: one lane (a two-rank communicator) per (peer, direction, tag)
//   nccl_world.cpp        the world communicator: the unique id, the GPU, the MPI control plane
//
// Design (the files say the rest of it):
// - Ordering. When an operation is issued, an event is recorded on the
//   caller's compute stream (issued()): the operation waits for the GPU work
//   queued before it and for nothing after. The communication thread then
//   queues the NCCL calls on the group's own stream and records a completion
//   event, which poll() checks; wait() returns once the data has arrived, so
//   anything queued afterwards (on any stream) sees it. The compute stream
//   never waits for the network.
// - Failure. An operation past comm.timeout_s breaks the group (QueuedComm).
//   Buffers of operations that may still run on the GPU are kept until the
//   communicator goes, and then it is aborted, not destroyed, so no kernel is
//   left waiting for a peer. abort() ends the job through MPI (or exits; the
//   peers' NCCL calls then fail on the closed connections) without touching
//   NCCL, whose abort needs every local rank.
// - NCCL calls from the process's communicators are serialized by one lock
//   (nccl_mutex()).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "comm/queued_comm.h"
#include "core/gpu.h"

namespace parallm::comm::nccl_detail {

void cuda_ok(cudaError_t e, const std::string& where, const std::string& what);
void nccl_ok(ncclResult_t r, const std::string& where, const std::string& what, ncclComm_t comm = nullptr);

// Every NCCL call of the process goes under this lock: NCCL forbids issuing
// to one communicator, or to communicators of one device, from several threads at once.
std::mutex& nccl_mutex();

// Whether the operation reduces (all_reduce, reduce, reduce_scatter).
bool reducing(OpKind k);

// Signature fields compared across ranks before a collective (int32, so
// counts travel as two halves; nccl_collectives.cpp).
constexpr int kSig = 7;

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

// Where a message stands, for the diagnosis of a timeout.
enum P2pStage : int {
  kStageQueued,      // behind earlier messages of its lane
  kStageHeader,      // a lane's first receive: nothing from the peer yet (no matching send posted)
  kStageConnecting,  // the lane's communicator is being made: both ends must join
  kStageEnqueuing,   // NCCL is queueing it (connecting to the peer on a lane's first message)
  kStageRunning,     // on the GPU, waiting for the peer's side
  kStageDone
};

class P2pOp;

// One way of messages between this rank and a peer, for one tag (nccl_p2p.cpp).
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

class NcclComm : public QueuedComm {
 public:
  NcclComm(int rank, int size, std::string name, CommOptions options, ncclComm_t comm, int device,
           std::unique_ptr<Communicator> ctrl);
  ~NcclComm() override;
  std::string backend() const override { return "nccl"; }
  int gpu_device() const override { return device_; }
  void abort(int code) override;

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  cudaStream_t copy_stream() const { return copy_stream_; }
  void* barrier_buf() const { return barrier_buf_.data(); }
  std::string err(const Op& op, const std::string& what) const { return error_text(op, what); }
  // What an operation that may still run on the GPU uses (it failed or timed
  // out): kept until the communicator is aborted.
  void bury(const Op& op);

  // ---- the collectives' signature check (over MPI; nccl_collectives.cpp) ----
  bool checks() const { return ctrl_ && options().check_ops; }
  // Starts comparing this collective's signature across the ranks.
  WorkPtr post_signature(const Op& op);
  // After the check: every rank's signature of this collective must match.
  void check_agreement(const Op& op);
  // all_to_all_v, after check_agreement: every pair of ranks agrees on its counts.
  void check_counts(const Op& op);

  // ---- lanes (communication thread only; nccl_p2p.cpp) ----
  Communicator& ctrl() const { return *ctrl_; }
  // The lane of a send or receive, made (without its communicator) if new.
  Lane& lane_for(const Op& op, bool* is_new);
  // Starts making the lane's communicator (nonblocking: progress() polls it).
  void connect(Lane& l, const ncclUniqueId& id, const Op& op);
  // Moves the lane on: connects it, and hands its waiting messages to NCCL in
  // order (one NCCL call in progress at a time, as a nonblocking communicator
  // requires). Errors name `op`, the message being polled.
  void progress(Lane& l, const Op& op);
  // True while NCCL is still working on the lane's last call; throws its error.
  bool lane_busy(Lane& l, const Op& op, const char* what);

 protected:
  bool host_only() const override { return false; }
  void thread_started() override { cudaSetDevice(device_); }
  void issued(Op& op) override;
  std::unique_ptr<Pending> start(Op& op) override;
  std::string diagnose(const Op& op, std::vector<PeerState>* peers) override;

 private:
  // Point to point as it is issued: a peer other than this rank, the control
  // plane that carries the headers, and a bounded number of lanes.
  void check_p2p(const Op& op, const std::string& where);
  // How far a send or receive that timed out got (its P2pStage), naming the peer.
  std::string diagnose_p2p(const Op& op) const;
  // A collective that timed out in its signature check: what the control plane says.
  std::string check_diagnosis(const Issued& is);
  void split_now(Op& op);

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

// The Pending of one operation, made on the communication thread by start():
// a collective on the group's stream (nccl_collectives.cpp), a send or receive
// on its lane (nccl_p2p.cpp).
std::unique_ptr<Pending> start_collective(NcclComm& c, Op& op);
std::unique_ptr<Pending> start_p2p(NcclComm& c, Op& op);

}  // namespace parallm::comm::nccl_detail
