// The NcclComm communicator (design: nccl_comm.h): what runs on the caller's
// thread as an operation is issued (the compute stream's event, the wire type,
// staging buffers for host operands), the hand-off of each operation to its
// Pending on the communication thread, splitting, and teardown, which aborts
// the NCCL communicators instead of destroying them while anything may still
// run on the GPU. Also the helpers every file of the backend shares.
#include "comm/nccl_comm.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace parallm::comm::nccl_detail {

void cuda_ok(cudaError_t e, const std::string& where, const std::string& what) {
  if (e == cudaSuccess) return;
  throw CudaError(where, fmt::format("{}: {} ({}) ({})", what, cudaGetErrorString(e), cudaGetErrorName(e),
                                     gpu::context().empty() ? "this process" : gpu::context()));
}

void nccl_ok(ncclResult_t r, const std::string& where, const std::string& what, ncclComm_t comm) {
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(comm);
  throw CommError(where, fmt::format("{}: NCCL error: {}{}", what, ncclGetErrorString(r),
                                     last && *last ? fmt::format(" ({})", last) : std::string()));
}

std::mutex& nccl_mutex() {
  static std::mutex mu;
  return mu;
}

bool reducing(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::Reduce || k == OpKind::ReduceScatter;
}

namespace {

bool on_device(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an unregistered host pointer on older runtimes
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
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

}  // namespace

NcclComm::NcclComm(int rank, int size, std::string name, CommOptions options, ncclComm_t comm, int device,
                   std::unique_ptr<Communicator> ctrl)
    : QueuedComm(rank, size, std::move(name), options), comm_(comm), device_(device), ctrl_(std::move(ctrl)) {
  cuda_ok(cudaSetDevice(device_), "comm.nccl", "cudaSetDevice");
  cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "comm.nccl", "creating the NCCL stream");
  cuda_ok(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "comm.nccl", "creating a copy stream");
  barrier_buf_ = gpu::DeviceBuffer(sizeof(float), MemCategory::Comm);
  if (ctrl_) sig_ = Tensor::empty({2 * kSig}, DType::I32, MemCategory::Comm);  // made once, not per collective
  start_thread();
}

NcclComm::~NcclComm() {
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

void NcclComm::abort(int code) {
  if (ctrl_) ctrl_->abort(code);  // MPI_Abort: does not return
  std::fflush(nullptr);
  std::_Exit(code);
}

void NcclComm::bury(const Op& op) {
  std::lock_guard<std::mutex> lock(grave_mu_);
  graveyard_.push_back({op.ext, op.a, op.b});
}

void NcclComm::issued(Op& op) {
  const std::string where = fmt::format("comm.{}", op_kind_name(op.kind));
  if (op.kind == OpKind::Split) return;
  if (!op.collective()) check_p2p(op, where);
  int cur = -1;
  cudaGetDevice(&cur);
  PARALLM_CHECK(cur == device_, CommError, where, "{}",
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

// A collective's signature check is polled (its Pending), so this thread
// keeps moving messages meanwhile: a peer may need one before it gets to
// the collective. A split waits for its check.
std::unique_ptr<Pending> NcclComm::start(Op& op) {
  if (!op.collective()) return start_p2p(*this, op);
  if (op.kind == OpKind::Split) {
    if (checks()) {
      post_signature(op)->wait();
      check_agreement(op);
    }
    split_now(op);
    return std::make_unique<Done>();
  }
  return start_collective(*this, op);
}

// An operation that timed out: how far it got. (On the communication thread;
// the waiter's watchdog passes no operation state.)
std::string NcclComm::diagnose(const Op& op, std::vector<PeerState>* /*peers*/) {
  if (!op.ext) return "";
  if (op.collective()) return check_diagnosis(*static_cast<const Issued*>(op.ext.get()));
  return diagnose_p2p(op);
}

void NcclComm::split_now(Op& op) {
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

}  // namespace parallm::comm::nccl_detail
