// The nccl backend's collectives (design: nccl_comm.h), queued on the group's
// stream by the communication thread; NcclPending polls their completion.
// - Tensors. Device memory goes to NCCL as it is (found by the pointer, not by
//   the tensor's tag). Host tensors (losses, counters, the train state) are
//   staged through device buffers; a host reduction of bf16 or uint16 is
//   widened to fp32 or int32 on the way, as the MPI backend accumulates.
//   Device reductions of bf16 use NCCL's own bf16 arithmetic; uint16 has no
//   NCCL type and is reduced only from host memory.
// - Counts that do not divide by the group: all_gather and reduce_scatter use
//   NCCL's ring collectives when they do, and otherwise one broadcast or
//   reduce per rank in one NCCL group (the shard_of partition). gather,
//   scatter, all_to_all and all_to_all_v are grouped point-to-point calls
//   (all_to_all_v: one send and one receive per peer with a non-zero count).
// - The signature check. With an MPI control plane (and comm.check_ops) the
//   ranks compare each collective's signature over MPI before it goes to
//   NCCL, so a skipped or mismatched collective is an error, not a hang
//   inside NCCL. An all_to_all_v then also compares each pair's counts over
//   MPI (check_counts).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "comm/nccl_comm.h"
#include "core/error.h"

namespace parallm::comm::nccl_detail {

namespace {

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

// The signature of a collective: kSig fields.
void signature(const Op& op, bool widen, int32_t* s) {
  const bool has_dtype = op.kind != OpKind::Barrier && op.kind != OpKind::Split;
  const bool rooted = op.kind == OpKind::Reduce || op.kind == OpKind::Broadcast || op.kind == OpKind::Gather ||
                      op.kind == OpKind::Scatter;
  s[0] = static_cast<int32_t>(op.seq & 0x7fffffff);
  s[1] = static_cast<int32_t>(op.kind);
  const int64_t count = op.kind == OpKind::AllToAllV ? 0 : op.count;  // differs per rank: check_counts
  s[2] = static_cast<int32_t>(count >> 31);
  s[3] = static_cast<int32_t>(count & 0x7fffffff);
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

// One collective: its signature check (when the ranks check), then its NCCL
// calls on the group's stream, then the copy of host results.
class NcclPending : public Pending {
 public:
  NcclPending(NcclComm& c, Op& op);
  ~NcclPending() override;
  bool poll() override;

 private:
  void* operand(Tensor& t, bool input);  // device address of an operand (staged from the host if `input`)
  void enqueue_now();                    // enqueue() under the NCCL lock
  void enqueue();
  // The collectives that take more than one NCCL call (or a copy of this rank's part).
  void enqueue_all_gather();
  void enqueue_reduce_scatter();
  void enqueue_gather();
  void enqueue_scatter();
  void enqueue_all_to_all();
  void enqueue_all_to_all_v();
  void copy_back();
  bool finished() const { return done_ && cudaEventQuery(done_) == cudaSuccess; }
  std::string where() const { return fmt::format("comm.{}", op_kind_name(op_.kind)); }
  // An NCCL call's result: throws its error, naming the operation.
  void ok(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess) nccl_ok(r, where(), c_.err(op_, what), c_.comm());
  }
  // `elems` elements on from `base`, in the wire type.
  void* at(void* base, int64_t elems) const { return static_cast<void*>(static_cast<char*>(base) + elems * esize_); }
  // A copy of this rank's part on the group's stream (none when in place).
  void d2d(void* dst, const void* src, int64_t elems);

  NcclComm& c_;
  Op& op_;
  Issued& is_;
  ncclDataType_t type_;
  size_t esize_;   // bytes per element on the wire
  WorkPtr check_;  // the signature check, polled before anything goes to NCCL
  cudaEvent_t done_ = nullptr;
  // ok() for GroupGuard.
  const std::function<void(ncclResult_t, const char*)> ok_ = [this](ncclResult_t r, const char* what) { ok(r, what); };
};

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

void NcclPending::d2d(void* dst, const void* src, int64_t elems) {
  if (elems > 0 && dst != src)
    cuda_ok(cudaMemcpyAsync(dst, src, static_cast<size_t>(elems) * esize_, cudaMemcpyDeviceToDevice, c_.stream()),
            where(), c_.err(op_, "copying this rank's part"));
}

void NcclPending::enqueue() {
  const std::string where = this->where();
  cudaStream_t st = c_.stream();
  cuda_ok(cudaStreamWaitEvent(st, is_.ready, 0), where, c_.err(op_, "waiting for the compute stream"));
  const int me = c_.rank();
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
    case OpKind::AllGather:
      enqueue_all_gather();
      break;
    case OpKind::ReduceScatter:
      enqueue_reduce_scatter();
      break;
    case OpKind::Gather:
      enqueue_gather();
      break;
    case OpKind::Scatter:
      enqueue_scatter();
      break;
    case OpKind::AllToAll:
      enqueue_all_to_all();
      break;
    case OpKind::AllToAllV:
      enqueue_all_to_all_v();
      break;
    case OpKind::Barrier:
      ok(ncclAllReduce(c_.barrier_buf(), c_.barrier_buf(), 1, ncclFloat32, ncclSum, comm, st), "ncclAllReduce");
      break;
    default:  // split runs on the host; point to point on lanes (P2pOp)
      throw InternalError(where, c_.err(op_, "not an operation for the NCCL stream"));
  }
  cuda_ok(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), where, c_.err(op_, "creating an event"));
  cuda_ok(cudaEventRecord(done_, st), where, c_.err(op_, "recording completion"));
}

void NcclPending::enqueue_all_gather() {
  const int n = c_.size(), me = c_.rank();
  const auto cnt = static_cast<size_t>(op_.count);
  cudaStream_t st = c_.stream();
  ncclComm_t comm = c_.comm();
  // In place when `in` is this rank's part of `out`: then it lives in out's staging too.
  const Shard mine = shard_of(op_.count, n, me);
  const bool in_place =
      op_.a.numel() == 0 ||
      static_cast<char*>(op_.a.raw()) == static_cast<char*>(op_.b.raw()) + mine.offset * dtype_size(op_.b.dtype());
  void* out = operand(op_.b, in_place);
  void* in = in_place ? at(out, mine.offset) : operand(op_.a, true);
  if (op_.count % n == 0) {
    if (cnt) ok(ncclAllGather(in, out, cnt / n, type_, comm, st), "ncclAllGather");
    return;
  }
  d2d(at(out, mine.offset), in, mine.count);
  GroupGuard group(ok_);
  for (int r = 0; r < n; ++r) {
    const Shard s = shard_of(op_.count, n, r);
    if (s.count) ok(ncclBroadcast(at(out, s.offset), at(out, s.offset), s.count, type_, r, comm, st), "ncclBroadcast");
  }
  group.end();
}

void NcclPending::enqueue_reduce_scatter() {
  const int n = c_.size(), me = c_.rank();
  const auto cnt = static_cast<size_t>(op_.count);
  cudaStream_t st = c_.stream();
  ncclComm_t comm = c_.comm();
  const ncclRedOp_t rop = nccl_op(op_.rop);
  void* in = operand(op_.a, true);
  void* out = operand(op_.b, false);
  if (op_.count % n == 0) {
    if (cnt) ok(ncclReduceScatter(in, out, cnt / n, type_, rop, comm, st), "ncclReduceScatter");
    return;
  }
  GroupGuard group(ok_);
  for (int r = 0; r < n; ++r) {
    const Shard s = shard_of(op_.count, n, r);
    if (s.count)
      ok(ncclReduce(at(in, s.offset), r == me ? out : at(in, s.offset), s.count, type_, rop, r, comm, st),
         "ncclReduce");
  }
  group.end();
}

void NcclPending::enqueue_gather() {
  const int n = c_.size(), me = c_.rank();
  cudaStream_t st = c_.stream();
  ncclComm_t comm = c_.comm();
  const bool root = me == op_.root;
  void* in = operand(op_.a, true);
  void* out = root ? operand(op_.b, false) : nullptr;
  const Shard mine = shard_of(op_.count, n, me);
  if (root) d2d(at(out, mine.offset), in, mine.count);
  GroupGuard group(ok_);
  if (root) {
    for (int r = 0; r < n; ++r) {
      const Shard s = shard_of(op_.count, n, r);
      if (r != me && s.count) ok(ncclRecv(at(out, s.offset), s.count, type_, r, comm, st), "ncclRecv");
    }
  } else if (mine.count) {
    ok(ncclSend(in, mine.count, type_, op_.root, comm, st), "ncclSend");
  }
  group.end();
}

void NcclPending::enqueue_scatter() {
  const int n = c_.size(), me = c_.rank();
  cudaStream_t st = c_.stream();
  ncclComm_t comm = c_.comm();
  const bool root = me == op_.root;
  void* in = root ? operand(op_.a, true) : nullptr;
  void* out = operand(op_.b, false);
  const Shard mine = shard_of(op_.count, n, me);
  if (root) d2d(out, at(in, mine.offset), mine.count);
  GroupGuard group(ok_);
  if (root) {
    for (int r = 0; r < n; ++r) {
      const Shard s = shard_of(op_.count, n, r);
      if (r != me && s.count) ok(ncclSend(at(in, s.offset), s.count, type_, r, comm, st), "ncclSend");
    }
  } else if (mine.count) {
    ok(ncclRecv(out, mine.count, type_, op_.root, comm, st), "ncclRecv");
  }
  group.end();
}

void NcclPending::enqueue_all_to_all() {
  const int n = c_.size(), me = c_.rank();
  cudaStream_t st = c_.stream();
  ncclComm_t comm = c_.comm();
  void* in = operand(op_.a, true);
  void* out = operand(op_.b, false);
  const int64_t block = op_.count / n;
  if (!block) return;
  d2d(at(out, me * block), at(in, me * block), block);
  GroupGuard group(ok_);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    ok(ncclSend(at(in, r * block), block, type_, r, comm, st), "ncclSend");
    ok(ncclRecv(at(out, r * block), block, type_, r, comm, st), "ncclRecv");
  }
  group.end();
}

void NcclPending::enqueue_all_to_all_v() {
  const int n = c_.size(), me = c_.rank();
  cudaStream_t st = c_.stream();
  ncclComm_t comm = c_.comm();
  const std::vector<int64_t>& send = op_.send_counts;
  const std::vector<int64_t>& recv = op_.recv_counts;
  // This rank's own part is a local copy: without the ranks' check (no MPI, or
  // check_ops off) its counts are still compared, so `out` is never overrun.
  if (send[me] != recv[me])
    throw CommError(where(), c_.err(op_, fmt::format("all_to_all_v counts disagree: rank {} sends {} element{} to "
                                                     "rank {}, which expects {} from it",
                                                     me, send[me], send[me] == 1 ? "" : "s", me, recv[me])));
  void* in = operand(op_.a, true);
  void* out = operand(op_.b, false);
  std::vector<int64_t> sdispl(n), rdispl(n);
  for (int j = 1; j < n; ++j) {
    sdispl[j] = sdispl[j - 1] + send[j - 1];
    rdispl[j] = rdispl[j - 1] + recv[j - 1];
  }
  d2d(at(out, rdispl[me]), at(in, sdispl[me]), send[me]);
  GroupGuard group(ok_);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    if (send[r]) ok(ncclSend(at(in, sdispl[r]), static_cast<size_t>(send[r]), type_, r, comm, st), "ncclSend");
    if (recv[r]) ok(ncclRecv(at(out, rdispl[r]), static_cast<size_t>(recv[r]), type_, r, comm, st), "ncclRecv");
  }
  group.end();
}

bool NcclPending::poll() {
  if (check_) {
    if (!check_->test()) return false;  // rethrows a failure of the control plane
    check_.reset();
    is_.check.reset();
    c_.check_agreement(op_);  // throws on a mismatch
    if (op_.kind == OpKind::AllToAllV) c_.check_counts(op_);
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
                     op_.kind == OpKind::AllToAll || op_.kind == OpKind::AllToAllV;
  // all_to_all_v's output past what it receives is left as it was.
  int64_t received = 0;
  for (int64_t c : op_.recv_counts) received += c;
  const std::string where = fmt::format("comm.{}", op_kind_name(op_.kind));
  for (auto [t, dev] : {std::pair<Tensor*, gpu::DeviceBuffer*>{a_out ? &op_.a : nullptr, &is_.sa},
                        std::pair<Tensor*, gpu::DeviceBuffer*>{b_out ? &op_.b : nullptr, &is_.sb}}) {
    if (!t || !dev->data()) continue;
    const bool widen = is_.wire.widen;
    const int64_t n = op_.kind == OpKind::AllToAllV ? received : t->numel();
    const size_t bytes = static_cast<size_t>(n) * is_.wire.esize;
    if (!bytes) continue;
    std::vector<char> wide(widen ? bytes : 0);
    void* dst = widen ? static_cast<void*>(wide.data()) : t->raw();
    cuda_ok(cudaMemcpyAsync(dst, dev->data(), bytes, cudaMemcpyDeviceToHost, c_.copy_stream()), where,
            c_.err(op_, "copying the result to the host"));
    cuda_ok(cudaStreamSynchronize(c_.copy_stream()), where, c_.err(op_, "copying the result to the host"));
    if (!widen) continue;
    auto* out = static_cast<uint16_t*>(t->raw());
    if (t->dtype() == DType::BF16) {
      const auto* f = reinterpret_cast<const float*>(wide.data());
      for (int64_t k = 0; k < n; ++k) out[k] = f32_to_bf16(f[k]);
    } else {
      const auto* v = reinterpret_cast<const int32_t*>(wide.data());
      for (int64_t k = 0; k < n; ++k) out[k] = static_cast<uint16_t>(v[k]);
    }
  }
}

}  // namespace

std::unique_ptr<Pending> start_collective(NcclComm& c, Op& op) {
  return std::make_unique<NcclPending>(c, op);
}

// ---- the signature check ----

WorkPtr NcclComm::post_signature(const Op& op) {
  int32_t* p = sig_.data<int32_t>();
  const bool widen = op.ext && static_cast<const Issued*>(op.ext.get())->wire.widen;
  signature(op, widen, p);
  for (int i = 0; i < kSig; ++i) p[kSig + i] = -p[i];
  return ctrl_->all_reduce_async(sig_, ReduceOp::Max);
}

void NcclComm::check_agreement(const Op& op) {
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

// After the signatures agreed (every rank is in this all_to_all_v): each rank
// tells each peer what it sends it and expects from it over the control
// plane, the verdicts are combined, and on a disagreement every rank gathers
// all the counts and names the pairs. Counts travel as two int32 halves.
void NcclComm::check_counts(const Op& op) {
  const int n = size();
  auto put = [](int64_t v, int32_t* p) {
    p[0] = static_cast<int32_t>(v >> 31);
    p[1] = static_cast<int32_t>(v & 0x7fffffff);
  };
  auto get = [](const int32_t* p) { return (static_cast<int64_t>(p[0]) << 31) | p[1]; };
  Tensor mine = Tensor::empty({4 * n}, DType::I32), theirs = Tensor::empty({4 * n}, DType::I32);
  for (int j = 0; j < n; ++j) {
    put(op.send_counts[j], mine.data<int32_t>() + 4 * j);
    put(op.recv_counts[j], mine.data<int32_t>() + 4 * j + 2);
  }
  ctrl_->all_to_all(mine, theirs);
  Tensor bad = Tensor::empty({1}, DType::I32);
  bad.data<int32_t>()[0] = 0;
  for (int j = 0; j < n; ++j) {
    const int32_t* p = theirs.data<int32_t>() + 4 * j;
    if (get(p) != op.recv_counts[j] || get(p + 2) != op.send_counts[j]) bad.data<int32_t>()[0] = 1;
  }
  ctrl_->all_reduce(bad, ReduceOp::Max);
  if (!bad.data<int32_t>()[0]) return;
  Tensor row = Tensor::empty({4 * n}, DType::I32), all = Tensor::empty({4 * n * n}, DType::I32);
  for (int j = 0; j < n; ++j) {
    put(op.send_counts[j], row.data<int32_t>() + 2 * j);
    put(op.recv_counts[j], row.data<int32_t>() + 2 * (n + j));
  }
  ctrl_->all_gather(row, all);
  std::vector<int64_t> rows(2 * static_cast<size_t>(n) * n);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = get(all.data<int32_t>() + 2 * k);
  throw CommError("comm.all_to_all_v",
                  error_text(op, "all_to_all_v counts disagree: " + all_to_all_v_disagreement(rows.data(), n)));
}

// The control plane's own timeout comes moments later and says what the peers are doing.
std::string NcclComm::check_diagnosis(const Issued& is) {
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

}  // namespace parallm::comm::nccl_detail
