// The "mpi" backend (OpenMPI or MPICH, thread level MULTIPLE). Operations run
// on the group's communication thread. A collective runs in two phases: an
// exchange of its signature (max of s and of -s tells whether all ranks
// agree), polled under the deadline, so a rank that never arrives or calls
// something else is reported; then the operation itself as the library's
// blocking call, which uses its tuned algorithms (the nonblocking forms
// progress only when polled and ran at half the bandwidth) and starts only
// once every rank is known to be there. The signature travels by
// point-to-point messages (a dissemination over log2(n) rounds), not by
// MPI_Iallreduce: with OpenMPI that nonblocking collective cost 2-12% of the
// 1-16 MiB all-reduce after it (`parallm bench comm`, 2 ranks). A data phase
// that still hangs (a peer dies mid-transfer) is caught by the waiter's
// watchdog, or, when it runs on the caller's thread, by the communication
// thread (QueuedComm::watch_caller). On disagreement the ranks all-gather their signatures and every
// rank reports who called what. An all_to_all_v's signature leaves out its
// count (what a rank sends differs per rank); once the signatures agree the
// ranks compare each pair's counts by blocking collectives on the control
// communicator (check_counts_v), so a disagreement is an error on every rank.
// Point-to-point operations stay nonblocking.
// Each group also has a control communicator (a duplicate) that carries the
// signatures and on which a rank whose operation timed out asks every peer
// what it is doing; peers answer from their communication thread while idle
// or waiting.
#include <fmt/ranges.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "comm/backends.h"
#include "comm/mpi_hosts.h"
#include "comm/peer_status.h"
#include "comm/queued_comm.h"
#include "core/error.h"

namespace parallm::comm {

namespace {

constexpr int kTagSignature = 32765;  // the status tags: mpi_hosts.h
constexpr int kSigFields = 6;         // seq, kind, count, dtype, root, reduce op

void mpi_check(int rc, const std::string& where, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommError(where, fmt::format("{}: MPI error: {}", what, std::string(msg, len)));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::I32:
      return MPI_INT32_T;
    case DType::BF16:
    case DType::U16:
      return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return MPI_SUM;
    case ReduceOp::Min:
      return MPI_MIN;
    case ReduceOp::Max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

// Shared by every communicator: MPI is finalized when the last one is gone.
struct MpiRuntime {
  bool we_initialized = false;
  std::vector<std::string> hosts;  // by world rank: where each rank runs (the diagnosis names them)
  // The world group's control communicator (its comm thread answers on it), for a diagnosis in any group to ask
  // who in the world is silent; null once the world group is gone. One diagnosis at a time in the process.
  MPI_Comm world_ctrl = MPI_COMM_NULL;
  std::mutex diagnose_mu;
  ~MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (we_initialized && !finalized) MPI_Finalize();
  }
};

std::string describe_sig(const int64_t* f) {
  return Op::outline(static_cast<OpKind>(f[1]), static_cast<uint64_t>(f[0]), f[2], static_cast<DType>(f[3]),
                     static_cast<ReduceOp>(f[5]), static_cast<int>(f[4]))
      .describe();
}

// A bf16 tensor widened to fp32 into `v` (bf16 is reduced in fp32).
void bf16_to_f32_vec(const Tensor& t, std::vector<float>& v) {
  v.resize(t.numel());
  const uint16_t* p = static_cast<const uint16_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = bf16_to_f32(p[i]);
}

class MpiComm;

// One collective in flight: check phase, then the operation, then staging back.
class CollPending : public Pending {
 public:
  CollPending(MpiComm& c, Op& op);
  ~CollPending() override;
  bool poll() override;

 private:
  void start_real();
  int start_reduce();              // MPI_Reduce (start_real() for a reduce)
  void set_shards(int64_t total);  // counts_ and displs_: the shard_of partition of `total`
  void set_counts_v();             // all_to_all_v: counts_/displs_ to send, rcounts_/rdispls_ to receive
  void check_counts_v();           // all_to_all_v after the signature check: every pair's counts agree
  void finish_real();
  [[noreturn]] void report_mismatch();
  int icount(int64_t n) const;
  void post_check_round();  // one round of the signature dissemination
  bool check_round_done();  // true once the last round is in

  MpiComm& c_;
  Op& op_;
  enum { kCheck, kMismatch, kReal, kDone } state_ = kCheck;
  MPI_Request req_ = MPI_REQUEST_NULL;
  MPI_Request round_reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int dist_ = 1;  // dissemination distance of the round in flight
  int64_t sig_[2 * kSigFields] = {}, got_[2 * kSigFields] = {}, mine_[kSigFields] = {};
  std::vector<int64_t> all_sigs_;
  std::vector<int> counts_, displs_, rcounts_, rdispls_;
  std::vector<float> tin_, tout_;  // fp32 staging of bf16 reductions
  std::vector<char> scratch_;      // a reduce's copy of the root's input, or the others' receive buffer
};

class P2pPending : public Pending {
 public:
  P2pPending(MpiComm& c, Op& op);
  bool poll() override;

 private:
  MpiComm& c_;
  Op& op_;
  MPI_Request req_ = MPI_REQUEST_NULL;
};

class MpiComm : public QueuedComm {
 public:
  MpiComm(std::shared_ptr<MpiRuntime> rt, MPI_Comm comm, int rank, int size, std::string name, CommOptions options)
      : QueuedComm(rank, size, std::move(name), options), rt_(std::move(rt)), comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    mpi_check(MPI_Comm_dup(comm_, &ctrl_), "comm.mpi", "duplicating the group for control messages");
    start_thread();
  }
  ~MpiComm() override {
    stop_thread();
    {
      std::lock_guard<std::mutex> lock(rt_->diagnose_mu);
      if (rt_->world_ctrl == ctrl_) rt_->world_ctrl = MPI_COMM_NULL;
    }
    MPI_Comm_free(&ctrl_);
    MPI_Comm_free(&comm_);
  }
  std::string backend() const override { return "mpi"; }
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

  MPI_Comm comm() const { return comm_; }
  MPI_Comm ctrl() const { return ctrl_; }
  std::string err(const Op& op, const std::string& what) const { return error_text(op, what); }

  std::unique_ptr<Communicator> do_split(const Op& op) {
    MPI_Comm nc = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split(comm_, op.color < 0 ? MPI_UNDEFINED : op.color, op.key, &nc), fmt::format("comm.split"),
              err(op, "MPI_Comm_split"));
    if (nc == MPI_COMM_NULL) return nullptr;
    int r = 0, n = 0;
    MPI_Comm_rank(nc, &r);
    MPI_Comm_size(nc, &n);
    return std::make_unique<MpiComm>(rt_, nc, r, n, op.name, options());
  }

 protected:
  std::unique_ptr<Pending> start(Op& op) override {
    if (op.collective()) return std::make_unique<CollPending>(*this, op);
    return std::make_unique<P2pPending>(*this, op);
  }

  // Answers peers' "what are you doing?" with {last finished collective,
  // collective in progress (0: none), its kind, its count}.
  void service() override {
    // The comm thread and an inline caller may both get here: one at a time
    // (probe and receive of a request must not be split between them).
    std::unique_lock<std::mutex> lock(service_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    const Activity act = activity();
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kTagStatusReq, ctrl_, &flag, &st) != MPI_SUCCESS || !flag) return;
      int64_t q = 0;
      MPI_Recv(&q, 1, MPI_INT64_T, st.MPI_SOURCE, kTagStatusReq, ctrl_, MPI_STATUS_IGNORE);
      const StatusAnswer rep = answer_of(act);
      MPI_Send(rep.data(), kStatusFields, MPI_INT64_T, st.MPI_SOURCE, kTagStatusRep, ctrl_);
    }
  }

  // Also called by a caller whose wait outlived the deadline while this
  // group's comm thread is stuck in the library (one diagnosis at a time).
  std::string diagnose(const Op& op, std::vector<PeerState>* peers) override {
    std::lock_guard<std::mutex> one_at_a_time(rt_->diagnose_mu);
    const int n = size(), me = rank();
    const double budget = diagnose_budget_s();
    const std::map<int, StatusAnswer> got = mpi_ask_peers(ctrl_, op.seq, budget, [this] { service(); });
    const Places places = mpi_places(comm_, rt_->hosts);
    if (peers) *peers = peer_states(n, me, answer_of(activity()), got, places);
    std::string s = describe_answers(op.seq, n, me, got, places, budget);
    // Every peer of the group answered: the rank that stopped may be in another group, busy with this one's peer
    // (a lost host's ranks that a dp peer waits for while its tp peer waits on it). Who in the world is silent?
    if (static_cast<int>(got.size()) == n - 1 && rt_->world_ctrl != MPI_COMM_NULL && ctrl_ != rt_->world_ctrl)
      s += world_silence(budget);
    return s;
  }

  // "; across the world, ranks 2,3 on host b did not answer ..." ("" when every rank answers).
  std::string world_silence(double budget) {
    int n = 0, me = 0;
    MPI_Comm_size(rt_->world_ctrl, &n);
    MPI_Comm_rank(rt_->world_ctrl, &me);
    const std::map<int, StatusAnswer> got = mpi_ask_peers(rt_->world_ctrl, 0, budget, [this] { service(); });
    if (static_cast<int>(got.size()) == n - 1) return "";
    std::vector<int> silent;
    for (int p = 0; p < n; ++p)
      if (p != me && !got.count(p)) silent.push_back(p);
    return "; across the world, " + silence_text(silent, mpi_places(rt_->world_ctrl, rt_->hosts), budget);
  }

 private:
  static StatusAnswer answer_of(const Activity& a) {
    return status_answer(a.done, a.done_kind, a.seq, a.kind, a.count);
  }
  std::shared_ptr<MpiRuntime> rt_;
  MPI_Comm comm_, ctrl_ = MPI_COMM_NULL;
  std::mutex service_mu_;
  friend class CollPending;
};

// An MPI error on `op`, formatted only when there is one (these run on every poll).
void op_check(int rc, const MpiComm& c, const Op& op, const char* what) {
  if (rc == MPI_SUCCESS) return;
  mpi_check(rc, fmt::format("comm.{}", op_kind_name(op.kind)), c.err(op, what));
}

// ---- collectives ----

CollPending::CollPending(MpiComm& c, Op& op) : c_(c), op_(op) {
  const bool has_dtype = op.kind != OpKind::Barrier && op.kind != OpKind::Split;
  const bool rooted = op.kind == OpKind::Reduce || op.kind == OpKind::Broadcast || op.kind == OpKind::Gather ||
                      op.kind == OpKind::Scatter;
  const bool reducing = op.kind == OpKind::AllReduce || op.kind == OpKind::Reduce || op.kind == OpKind::ReduceScatter;
  const DType dt = op.dtype();
  mine_[0] = static_cast<int64_t>(op.seq);
  mine_[1] = static_cast<int64_t>(op.kind);
  mine_[2] = op.kind == OpKind::AllToAllV ? 0 : op.count;  // all_to_all_v: counts differ per rank (check_counts_v)
  mine_[3] = has_dtype ? static_cast<int64_t>(dt) : 0;
  mine_[4] = rooted ? op.root : 0;
  mine_[5] = reducing ? static_cast<int64_t>(op.rop) : 0;
  if (!c_.options().check_ops) {
    start_real();
    return;
  }
  for (int i = 0; i < kSigFields; ++i) {
    sig_[i] = mine_[i];
    sig_[kSigFields + i] = -mine_[i];
  }
  if (c_.size() > 1) post_check_round();
}

// Dissemination: in round k every rank sends what it has to rank + 2^k and
// takes the maximum with what rank - 2^k sent; after ceil(log2 n) rounds all
// hold the maximum over the group (max is idempotent, so overlaps are fine).
// Point-to-point messages on the control communicator, with their own tag.
void CollPending::post_check_round() {
  const int n = c_.size(), me = c_.rank();
  op_check(
      MPI_Irecv(got_, 2 * kSigFields, MPI_INT64_T, (me - dist_ + n) % n, kTagSignature, c_.ctrl(), &round_reqs_[0]), c_,
      op_, "signature check");
  op_check(MPI_Isend(sig_, 2 * kSigFields, MPI_INT64_T, (me + dist_) % n, kTagSignature, c_.ctrl(), &round_reqs_[1]),
           c_, op_, "signature check");
}

bool CollPending::check_round_done() {
  if (c_.size() == 1) return true;
  int flag = 0;
  op_check(MPI_Testall(2, round_reqs_, &flag, MPI_STATUSES_IGNORE), c_, op_, "signature check");
  if (!flag) return false;
  for (int i = 0; i < 2 * kSigFields; ++i) sig_[i] = std::max(sig_[i], got_[i]);
  dist_ *= 2;
  if (dist_ >= c_.size()) return true;
  post_check_round();
  return false;
}

// An operation abandoned mid-check (a timeout): a late peer's signature must
// not land in freed memory.
CollPending::~CollPending() {
  if (round_reqs_[0] != MPI_REQUEST_NULL) {
    MPI_Cancel(&round_reqs_[0]);
    MPI_Request_free(&round_reqs_[0]);
  }
  if (round_reqs_[1] != MPI_REQUEST_NULL) MPI_Request_free(&round_reqs_[1]);
}

int CollPending::icount(int64_t n) const {
  PARALLM_CHECK(n <= INT_MAX, ShapeError, fmt::format("comm.{}", op_kind_name(op_.kind)), "{}",
                c_.err(op_, fmt::format("{} elements exceed MPI's int count; split the tensor", n)));
  return static_cast<int>(n);
}

bool CollPending::poll() {
  if (state_ == kDone) return true;
  int flag = 0;
  if (state_ == kCheck)
    flag = check_round_done();
  else
    op_check(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), c_, op_, "MPI_Test");
  if (!flag) return false;
  if (state_ == kCheck) {
    bool agree = true;
    for (int i = 0; i < kSigFields; ++i) agree &= sig_[i] == -sig_[kSigFields + i];
    if (agree) {
      if (op_.kind == OpKind::AllToAllV) check_counts_v();
      start_real();  // blocking: the data has moved when it returns
      if (state_ != kDone) finish_real();
      state_ = kDone;
      return true;
    }
    all_sigs_.resize(static_cast<size_t>(kSigFields) * c_.size());
    state_ = kMismatch;
    op_check(
        MPI_Iallgather(mine_, kSigFields, MPI_INT64_T, all_sigs_.data(), kSigFields, MPI_INT64_T, c_.comm(), &req_), c_,
        op_, "gathering signatures");
    return false;
  }
  if (state_ == kMismatch) report_mismatch();
  finish_real();
  state_ = kDone;
  return true;
}

void CollPending::report_mismatch() {
  std::map<std::string, std::vector<int>> by;
  for (int r = 0; r < c_.size(); ++r) by[describe_sig(&all_sigs_[static_cast<size_t>(r) * kSigFields])].push_back(r);
  std::string s;
  for (const auto& [what, ranks] : by) s += (s.empty() ? "" : "; ") + rank_list(ranks) + " called " + what;
  throw CommError(fmt::format("comm.{}", op_kind_name(op_.kind)),
                  c_.err(op_, "collective mismatch (a rank skipped or reordered a collective): " + s));
}

void CollPending::set_shards(int64_t total) {
  const int n = c_.size();
  counts_.resize(n);
  displs_.resize(n);
  for (int r = 0; r < n; ++r) {
    Shard s = shard_of(total, n, r);
    counts_[r] = icount(s.count);
    displs_[r] = icount(s.offset);
  }
}

// Whether MPI's int counts and displacements hold `counts` laid out one after another.
bool fits_int(const std::vector<int64_t>& counts) {
  int64_t offset = 0;
  for (int64_t c : counts) {
    if (c > INT_MAX || offset > INT_MAX) return false;
    offset += c;
  }
  return true;
}

void CollPending::set_counts_v() {
  const int n = c_.size();
  counts_.resize(n);
  displs_.resize(n);
  rcounts_.resize(n);
  rdispls_.resize(n);
  int64_t so = 0, ro = 0;
  for (int j = 0; j < n; ++j) {
    counts_[j] = icount(op_.send_counts[j]);
    displs_[j] = icount(so);
    so += op_.send_counts[j];
    rcounts_[j] = icount(op_.recv_counts[j]);
    rdispls_[j] = icount(ro);
    ro += op_.recv_counts[j];
  }
}

// Every rank is in this all_to_all_v (the signatures agreed), so blocking
// collectives on the control communicator are safe: each rank tells each
// peer what it sends it and expects from it, the verdicts are combined, and
// on a disagreement (or counts beyond MPI's int on some rank) every rank
// gathers all the counts and names the pairs, so all fail alike.
void CollPending::check_counts_v() {
  const int n = c_.size();
  const std::vector<int64_t>& send = op_.send_counts;
  const std::vector<int64_t>& recv = op_.recv_counts;
  std::vector<int64_t> mine(2 * static_cast<size_t>(n)), theirs(2 * static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    mine[2 * j] = send[j];
    mine[2 * j + 1] = recv[j];
  }
  op_check(MPI_Alltoall(mine.data(), 2, MPI_INT64_T, theirs.data(), 2, MPI_INT64_T, c_.ctrl()), c_, op_,
           "exchanging the counts");
  int64_t bad = fits_int(send) && fits_int(recv) ? 0 : 1;
  for (int j = 0; j < n; ++j) bad |= theirs[2 * j] != recv[j] || theirs[2 * j + 1] != send[j] ? 1 : 0;
  op_check(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT64_T, MPI_MAX, c_.ctrl()), c_, op_, "comparing the counts");
  if (!bad) return;
  std::vector<int64_t> row(send), rows(2 * static_cast<size_t>(n) * n);
  row.insert(row.end(), recv.begin(), recv.end());
  op_check(MPI_Allgather(row.data(), 2 * n, MPI_INT64_T, rows.data(), 2 * n, MPI_INT64_T, c_.ctrl()), c_, op_,
           "gathering the counts");
  const std::string pairs = all_to_all_v_disagreement(rows.data(), n);
  if (!pairs.empty()) throw CommError("comm.all_to_all_v", c_.err(op_, "all_to_all_v counts disagree: " + pairs));
  std::vector<int> big;
  for (int r = 0; r < n; ++r) {
    const int64_t* p = &rows[2 * static_cast<size_t>(n) * r];
    if (!fits_int(std::vector<int64_t>(p, p + n)) || !fits_int(std::vector<int64_t>(p + n, p + 2 * n)))
      big.push_back(r);
  }
  throw ShapeError("comm.all_to_all_v",
                   c_.err(op_, fmt::format("the counts of {} exceed MPI's int counts and displacements (more than {} "
                                           "elements to send or receive); split the exchange",
                                           rank_list(big), INT_MAX)));
}

int CollPending::start_reduce() {
  void* buf = op_.a.raw();
  MPI_Datatype t = mpi_type(op_.dtype());
  if (op_.dtype() == DType::BF16) {
    bf16_to_f32_vec(op_.a, tin_);
    buf = tin_.data();
    t = MPI_FLOAT;
  }
  // No MPI_IN_PLACE: MPICH 4.0-4.1 crash with it when the root is not rank 0
  // (pmodels/mpich#6540). The root sends a copy of its input; the others
  // get a scratch receive buffer (only significant at the root, but some
  // algorithms touch it).
  int size = 0;
  MPI_Type_size(t, &size);
  const size_t bytes = static_cast<size_t>(op_.count) * static_cast<size_t>(size);
  scratch_.resize(bytes + 1);
  void* send = buf;
  void* recv = scratch_.data();
  if (c_.rank() == op_.root) {
    if (bytes) std::memcpy(scratch_.data(), buf, bytes);
    send = scratch_.data();
    recv = buf;
  }
  return MPI_Reduce(send, recv, icount(op_.count), t, mpi_op(op_.rop), op_.root, c_.comm());
}

void CollPending::start_real() {
  state_ = kReal;
  const int n = c_.size(), me = c_.rank();
  MPI_Comm comm = c_.comm();
  const DType dt = op_.dtype();
  const bool bf16 = dt == DType::BF16;
  int rc = MPI_SUCCESS;
  switch (op_.kind) {
    case OpKind::AllReduce:
      if (bf16) {
        bf16_to_f32_vec(op_.a, tin_);
        rc = MPI_Allreduce(MPI_IN_PLACE, tin_.data(), icount(op_.count), MPI_FLOAT, mpi_op(op_.rop), comm);
      } else {
        rc = MPI_Allreduce(MPI_IN_PLACE, op_.a.raw(), icount(op_.count), mpi_type(dt), mpi_op(op_.rop), comm);
      }
      break;
    case OpKind::Reduce:
      rc = start_reduce();
      break;
    case OpKind::Broadcast:
      rc = MPI_Bcast(op_.a.raw(), icount(op_.count), mpi_type(dt), op_.root, comm);
      break;
    case OpKind::AllGather: {
      set_shards(op_.count);
      // In place when the input is this rank's own part of the output (ZeRO gathers shards that way).
      const void* send = op_.a.raw();
      if (send == static_cast<const char*>(op_.b.raw()) + static_cast<size_t>(displs_[me]) * dtype_size(dt))
        send = MPI_IN_PLACE;
      rc = MPI_Allgatherv(send, counts_[me], mpi_type(dt), op_.b.raw(), counts_.data(), displs_.data(), mpi_type(dt),
                          comm);
      break;
    }
    case OpKind::Gather:
      set_shards(op_.count);
      rc = MPI_Gatherv(op_.a.raw(), counts_[me], mpi_type(op_.a.dtype()), op_.b.raw(), counts_.data(), displs_.data(),
                       mpi_type(op_.a.dtype()), op_.root, comm);
      break;
    case OpKind::Scatter:
      set_shards(op_.count);
      rc = MPI_Scatterv(op_.a.raw(), counts_.data(), displs_.data(), mpi_type(op_.b.dtype()), op_.b.raw(), counts_[me],
                        mpi_type(op_.b.dtype()), op_.root, comm);
      break;
    case OpKind::ReduceScatter:
      set_shards(op_.count);
      if (bf16) {
        bf16_to_f32_vec(op_.a, tin_);
        tout_.resize(op_.b.numel());
        rc = MPI_Reduce_scatter(tin_.data(), tout_.data(), counts_.data(), MPI_FLOAT, mpi_op(op_.rop), comm);
      } else {
        rc = MPI_Reduce_scatter(op_.a.raw(), op_.b.raw(), counts_.data(), mpi_type(dt), mpi_op(op_.rop), comm);
      }
      break;
    case OpKind::AllToAll:
      rc = MPI_Alltoall(op_.a.raw(), icount(op_.count / n), mpi_type(dt), op_.b.raw(), icount(op_.count / n),
                        mpi_type(dt), comm);
      break;
    case OpKind::AllToAllV: {
      set_counts_v();
      // An empty tensor may have no storage: MPI gets a valid address all the same.
      static char none;
      void* in = op_.a.numel() ? op_.a.raw() : &none;
      void* out = op_.b.numel() ? op_.b.raw() : &none;
      rc = MPI_Alltoallv(in, counts_.data(), displs_.data(), mpi_type(dt), out, rcounts_.data(), rdispls_.data(),
                         mpi_type(dt), comm);
      break;
    }
    case OpKind::Barrier:
      rc = MPI_Barrier(comm);
      break;
    case OpKind::Split:
      // Every rank passed the signature check, so the blocking split completes.
      *op_.split_out = c_.do_split(op_);
      state_ = kDone;
      return;
    default:
      throw InternalError(fmt::format("comm.{}", op_kind_name(op_.kind)), c_.err(op_, "not a collective"));
  }
  op_check(rc, c_, op_, "starting the operation");
}

void CollPending::finish_real() {
  const int n = c_.size();
  const bool avg = op_.rop == ReduceOp::Avg;
  const bool reducing = op_.kind == OpKind::AllReduce || op_.kind == OpKind::ReduceScatter ||
                        (op_.kind == OpKind::Reduce && c_.rank() == op_.root);
  if (!reducing) return;
  Tensor& dst = op_.kind == OpKind::ReduceScatter ? op_.b : op_.a;
  const float scale = avg ? 1.0f / static_cast<float>(n) : 1.0f;
  if (dst.dtype() == DType::BF16) {
    const std::vector<float>& src = op_.kind == OpKind::ReduceScatter ? tout_ : tin_;
    uint16_t* p = static_cast<uint16_t*>(dst.raw());
    for (int64_t i = 0; i < dst.numel(); ++i) p[i] = f32_to_bf16(src[i] * scale);
  } else if (avg) {
    float* p = static_cast<float*>(dst.raw());
    for (int64_t i = 0; i < dst.numel(); ++i) p[i] *= scale;
  }
}

// ---- point to point ----

P2pPending::P2pPending(MpiComm& c, Op& op) : c_(c), op_(op) {
  PARALLM_CHECK(op.count <= INT_MAX, ShapeError, fmt::format("comm.{}", op_kind_name(op.kind)), "{}",
                c.err(op, "too many elements for one MPI message; split the tensor"));
  const int cnt = static_cast<int>(op.count);
  const int rc = op.kind == OpKind::Send
                     ? MPI_Isend(op.a.raw(), cnt, mpi_type(op.a.dtype()), op.root, op.tag, c.comm(), &req_)
                     : MPI_Irecv(op.a.raw(), cnt, mpi_type(op.a.dtype()), op.root, op.tag, c.comm(), &req_);
  op_check(rc, c, op, "starting the operation");
}

bool P2pPending::poll() {
  int flag = 0;
  MPI_Status st;
  op_check(MPI_Test(&req_, &flag, &st), c_, op_, "MPI_Test");
  if (flag && op_.kind == OpKind::Recv) {
    int got = 0;
    MPI_Get_count(&st, mpi_type(op_.a.dtype()), &got);
    PARALLM_CHECK(got == op_.count, CommError, fmt::format("comm.recv"), "{}",
                  c_.err(op_, fmt::format("received {} elements, expected {}", got, op_.count)));
  }
  return flag != 0;
}

}  // namespace

double native_loop(Communicator& c, OpKind kind, Tensor in, Tensor out, int iters) {
  auto* mc = dynamic_cast<MpiComm*>(&c);
  PARALLM_CHECK(mc, CommError, "comm.native_loop", "the {} backend has no library collectives to compare with",
                c.backend());
  const DType dt = in.dtype();
  PARALLM_CHECK(dt != DType::BF16, CommError, "comm.native_loop", "MPI has no bf16 type to compare with");
  const int n = c.size();
  const MPI_Comm comm = mc->comm();
  const MPI_Datatype t = mpi_type(dt);
  auto icount = [&](int64_t x) {
    PARALLM_CHECK(x <= INT_MAX, CommError, "comm.native_loop", "count {} is beyond MPI's int counts", x);
    return static_cast<int>(x);
  };
  const bool blocked = kind == OpKind::AllGather || kind == OpKind::ReduceScatter || kind == OpKind::AllToAll;
  const int64_t total = kind == OpKind::AllGather ? out.numel() : in.numel();
  PARALLM_CHECK(!blocked || total % n == 0, CommError, "comm.native_loop", "count {} not divisible by {} ranks", total,
                n);
  const int block = icount(total / n);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    int rc = MPI_SUCCESS;
    switch (kind) {
      case OpKind::AllReduce:
        rc = MPI_Allreduce(MPI_IN_PLACE, in.raw(), icount(in.numel()), t, MPI_SUM, comm);
        break;
      case OpKind::AllGather:
        rc = MPI_Allgather(in.raw(), block, t, out.raw(), block, t, comm);
        break;
      case OpKind::ReduceScatter:
        rc = MPI_Reduce_scatter_block(in.raw(), out.raw(), block, t, MPI_SUM, comm);
        break;
      case OpKind::Broadcast:
        rc = MPI_Bcast(in.raw(), icount(in.numel()), t, 0, comm);
        break;
      case OpKind::AllToAll:
        rc = MPI_Alltoall(in.raw(), block, t, out.raw(), block, t, comm);
        break;
      default:
        throw CommError("comm.native_loop", fmt::format("no library loop for {}", op_kind_name(kind)));
    }
    mpi_check(rc, "comm.native_loop", op_kind_name(kind));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string mpi_library_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, static_cast<size_t>(len));
  s = s.substr(0, s.find('\n'));
  while (!s.empty() && (s.back() == ',' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

std::unique_ptr<Communicator> make_mpi_world(const CommOptions& options) {
  auto rt = std::make_shared<MpiRuntime>();
  int init = 0, provided = 0;
  MPI_Initialized(&init);
  if (!init) {
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "comm.mpi", "MPI_Init_thread");
    rt->we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  PARALLM_CHECK(provided == MPI_THREAD_MULTIPLE, CommError, "comm.mpi",
                "the MPI library gives thread level {}, parallm needs MPI_THREAD_MULTIPLE ({})", provided,
                static_cast<int>(MPI_THREAD_MULTIPLE));
  MPI_Comm world = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "comm.mpi", "duplicating MPI_COMM_WORLD");
  int r = 0, n = 0;
  MPI_Comm_rank(world, &r);
  MPI_Comm_size(world, &n);
  rt->hosts = mpi_gather_hosts(world);  // a timeout's diagnosis names the hosts of the ranks that did not answer
  MpiRuntime& runtime = *rt;
  auto c = std::make_unique<MpiComm>(std::move(rt), world, r, n, "world", options);
  std::lock_guard<std::mutex> lock(runtime.diagnose_mu);
  runtime.world_ctrl = c->ctrl();
  return c;
}

}  // namespace parallm::comm
