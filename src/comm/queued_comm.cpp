#include "comm/queued_comm.h"

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <list>
#include <utility>

#include "comm/device_staging.h"
#include "core/env.h"
#include "core/error.h"
#include "core/trace.h"

namespace parallm::comm {

namespace {
using Clock = std::chrono::steady_clock;

bool is_float(DType t) {
  return t == DType::F32 || t == DType::BF16;
}

// On the first timeout of the process, every thread's stack goes to the trace
// file (when the program installed one); the error says where.
std::string stacks_note(const std::string& reason) {
  const std::string path = trace::dump_once("timeout: " + reason);
  return path.empty() ? std::string() : "; stacks of every thread in " + path;
}
}  // namespace

// ---- WorkState ----

void WorkState::wait() {
  struct Waiting {  // counted while blocked, so the comm thread polls eagerly meanwhile
    std::atomic<int>* n;
    explicit Waiting(std::atomic<int>* c) : n(c) {
      if (n) n->fetch_add(1, std::memory_order_relaxed);
    }
    ~Waiting() {
      if (n) n->fetch_sub(1, std::memory_order_relaxed);
    }
  } waiting(waiters_);
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_s_ <= 0)
    cv_.wait(lock, [&] { return done_; });
  else
    watch(lock);
  if (err_) std::rethrow_exception(err_);
}

void WorkState::arm(double timeout_s, const Op& op, const std::string* group, std::atomic<int>* waiters,
                    QueuedComm* owner) {
  timeout_s_ = timeout_s;
  kind_ = op.kind;
  seq_ = op.seq;
  peer_ = op.collective() ? -1 : op.root;
  count_ = op.count;
  dtype_ = op.dtype();
  rop_ = op.rop;
  group_ = group;
  waiters_ = waiters;
  owner_ = owner;
}

// The comm thread reports timeouts it can see at the deadline; this only fires
// when it is itself stuck in the library. Within the grace the waiter asks the
// peers itself (diagnose_budget_s() <= grace - 1 s), so its error still comes
// timeout + grace after the start. Returns with `lock` held once done.
void WorkState::watch(std::unique_lock<std::mutex>& lock) {
  const double grace = std::max(2.0, 0.1 * timeout_s_);
  const double budget = owner_ ? owner_->diagnose_budget_s() : 0.0;
  while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return done_; })) {
    const double ran = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (!running_ || ran < 1.0) continue;
    const bool expired = ran > timeout_s_ + grace + diagnosing_s_ - budget;
    lock.unlock();  // the comm thread may finish the work meanwhile
    if (!expired) {
      if (owner_) owner_->service();  // peers diagnosing a hang hear from this rank even if its comm thread is stuck
      lock.lock();
      continue;
    }
    const Op op = Op::outline(kind_, seq_, count_, dtype_, rop_, std::max(peer_, 0));
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const std::string with =
        peer_ < 0 ? "" : fmt::format(" ({} rank {})", kind_ == OpKind::Send ? "to" : "from", peer_);
    const std::string what = fmt::format(
        "still inside the communication library after {:.1f} s (comm.timeout_s {:.1f}): a peer died or stopped, or "
        "the network stalled mid-transfer",
        total, timeout_s_);
    const std::string brief =
        fmt::format("{} #{}{} in group {}: {}", op_kind_name(kind_), seq_, with, group_ ? *group_ : "?", what);
    // The deadline first: the report's I/O may itself hang on the failure it reports.
    if (const TimeoutHook hook = timeout_hook()) hook(brief, true);
    // The report asks the peers and dumps every thread's stacks (this one's waker included): unlocked. Nothing is
    // written if the operation completes meanwhile.
    const auto pending = [&] {
      std::lock_guard<std::mutex> l(mu_);
      return !done_;
    };
    const std::string msg = owner_ ? owner_->hang_report(op, what, total, pending) : brief + stacks_note(brief);
    lock.lock();
    if (done_) return;
    lock.unlock();
    const CommError err("comm.wait", msg);
    if (owner_) owner_->fail_all(std::make_exception_ptr(err));  // the group is broken (its thread may never return)
    throw err;
  }
}

bool WorkState::test() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ && err_) std::rethrow_exception(err_);
  return done_;
}

void WorkState::finish(std::exception_ptr err) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    done_ = true;
    err_ = std::move(err);
  }
  cv_.notify_all();
}

Op Op::outline(OpKind kind, uint64_t seq, int64_t count, DType dtype, ReduceOp rop, int root) {
  Op op;
  op.kind = kind;
  op.seq = seq;
  op.count = count;
  op.a = op.b = Tensor::view_of(nullptr, {0}, dtype);
  op.rop = rop;
  op.root = root;
  return op;
}

std::string Op::describe() const {
  std::string s = fmt::format("{} #{}", op_kind_name(kind), seq);
  switch (kind) {
    case OpKind::Barrier:
      return s;
    case OpKind::Split:
      return s + fmt::format(" (color {}, key {})", color, key);
    case OpKind::Send:
    case OpKind::Recv:
      return s + fmt::format(" ({} x {}, {} rank {}, tag {})", count, dtype_name(dtype()),
                             kind == OpKind::Send ? "to" : "from", root, tag);
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
      return s + fmt::format(" ({} x {}, {})", count, dtype_name(dtype()), reduce_op_name(rop));
    case OpKind::Reduce:
      return s + fmt::format(" ({} x {}, {}, root {})", count, dtype_name(dtype()), reduce_op_name(rop), root);
    case OpKind::Broadcast:
    case OpKind::Gather:
    case OpKind::Scatter:
      return s + fmt::format(" ({} x {}, root {})", count, dtype_name(dtype()), root);
    case OpKind::AllToAllV: {  // a signature (another rank's call) has no counts
      if (send_counts.empty()) return s + fmt::format(" ({})", dtype_name(dtype()));
      int64_t received = 0;
      for (int64_t c : recv_counts) received += c;
      return s + fmt::format(" ({} sent, {} received x {})", count, received, dtype_name(dtype()));
    }
    default:
      return s + fmt::format(" ({} x {})", count, dtype_name(dtype()));
  }
}

std::string all_to_all_v_disagreement(const int64_t* rows, int n, int max_pairs) {
  std::string s;
  int found = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const int64_t sends = rows[static_cast<size_t>(2 * i) * n + j];
      const int64_t expects = rows[static_cast<size_t>(2 * j + 1) * n + i];
      if (sends == expects) continue;
      if (found++ < max_pairs)
        s += fmt::format("{}rank {} sends {} element{} to rank {}, which expects {} from it", s.empty() ? "" : "; ", i,
                         sends, sends == 1 ? "" : "s", j, expects);
    }
  if (found > max_pairs) s += fmt::format("; and {} more pair{}", found - max_pairs, found - max_pairs == 1 ? "" : "s");
  return s;
}

// ---- QueuedComm: validation on the caller's thread ----

namespace {
// How long the comm thread sleeps between polls (PARALLM_COMM_POLL_US), read once.
std::chrono::microseconds poll_interval() {
  static const std::chrono::microseconds us(env::integer(env::Var::CommPollUs, 0, 1000000));
  return us;
}
}  // namespace

QueuedComm::QueuedComm(int rank, int size, std::string name, CommOptions options)
    : rank_(rank), size_(size), name_(std::move(name)), options_(options) {
  PARALLM_CHECK(options_.timeout_s > 0, ConfigError, "comm", "comm.timeout_s must be positive, got {}",
                options_.timeout_s);
  poll_interval();  // a bad PARALLM_COMM_POLL_US is an error here, not on the comm thread
}

QueuedComm::~QueuedComm() {
  stop_thread();
}

void QueuedComm::start_thread() {
  if (threaded())
    thread_ = std::thread([this] {
      trace::set_thread_name("parallm-comm");
      thread_started();
      loop();
      std::lock_guard<std::mutex> lock(mu_);
      thread_exited_ = true;
      exited_cv_.notify_all();
    });
}

// A broken group (an operation failed or timed out) may have its thread stuck
// inside the library for good (a lost peer): joining it would hang the error's
// unwinding, so after a short wait the timeout hook is told (the program
// reports the error and ends) before the join.
void QueuedComm::stop_thread() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
  if (!thread_.joinable()) return;
  if (broken_ && !exited_cv_.wait_for(lock, std::chrono::seconds(2), [&] { return thread_exited_; })) {
    std::string why = "an operation failed";
    try {
      std::rethrow_exception(broken_);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    lock.unlock();
    if (const TimeoutHook hook = timeout_hook())
      hook(
          fmt::format("{} (group {}'s communication thread is still inside the library 2 s later: ending)", why, name_),
          false);
  } else {
    lock.unlock();
  }
  thread_.join();
}

std::string QueuedComm::error_text(const Op& op, const std::string& what) const {
  return fmt::format("{} in group {} (rank {}/{}): {}", op.describe(), name_, rank_, size_, what);
}

void QueuedComm::check_root(int root, const char* what) const {
  PARALLM_CHECK(root >= 0 && root < size_, ShapeError, fmt::format("comm.{}", what),
                "rank {} is not in group {} of size {} (rank {}/{})", root, name_, size_, rank_, size_);
}

void QueuedComm::check_count(const Tensor& t, int64_t want, const char* op, const char* which) const {
  PARALLM_CHECK(t.numel() == want, ShapeError, fmt::format("comm.{}", op),
                "{} has {} elements, expected {} (rank {}/{} of group {})", which, t.numel(), want, rank_, size_,
                name_);
}

WorkPtr QueuedComm::submit(Op op) {
  if (host_only() && on_device(op)) stage(op, rank_);
  issued(op);
  // Counted as issued (the checks passed); the payload as OpCounts defines it.
  const auto k = static_cast<size_t>(op.kind);
  calls_[k].fetch_add(1, std::memory_order_relaxed);
  bytes_[k].fetch_add(op.count * static_cast<int64_t>(dtype_size(op.dtype())), std::memory_order_relaxed);
  op.work = std::make_shared<WorkState>();
  WorkPtr handle = op.work;
  if (!threaded()) {
    op.seq = op.collective() ? next_coll_++ : next_p2p_++;
    try {
      op.work->started();
      auto p = begin(op);
      while (!p->poll()) {
      }
      op.work->finish(nullptr);
    } catch (...) {
      op.work->finish(std::current_exception());
    }
    return handle;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_) {
    op.work->finish(broken_);
    return handle;
  }
  op.seq = op.collective() ? next_coll_++ : next_p2p_++;
  if (blocking_caller() == this && op.collective() && queue_.empty() && act_.seq == 0) {
    set_running(op, true);
    lock.unlock();
    run_inline(op);
    return handle;
  }
  op.work->arm(options_.timeout_s, op, &name_, &waiters_, this);
  queue_.push_back(std::move(op));
  cv_.notify_all();
  return handle;
}

std::unique_ptr<Pending> QueuedComm::begin(Op& op) {
  if (!op.staged) return start(op);
  return staged_start(op, [this, &op] { return start(op); });
}

OpCounts QueuedComm::counts() const {
  OpCounts c;
  for (int k = 0; k < kOpKinds; ++k) {
    c.calls[k] = calls_[k].load(std::memory_order_relaxed);
    c.bytes[k] = bytes_[k].load(std::memory_order_relaxed);
  }
  return c;
}

void QueuedComm::reset_counts() {
  for (int k = 0; k < kOpKinds; ++k) {
    calls_[k].store(0, std::memory_order_relaxed);
    bytes_[k].store(0, std::memory_order_relaxed);
  }
}

bool QueuedComm::broken() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_ != nullptr;
}

QueuedComm::Activity QueuedComm::activity() {
  std::lock_guard<std::mutex> lock(mu_);
  return act_;
}

void QueuedComm::set_running(const Op& op, bool on_caller) {  // under mu_
  act_.seq = op.seq;
  act_.kind = op.kind;
  act_.count = op.count;
  act_.dtype = op.dtype();
  act_.rop = op.rop;
  act_.root = op.root;
  act_.since = Clock::now();
  act_.on_caller = on_caller;
  act_.reported = false;
}

void QueuedComm::set_finished(uint64_t seq) {
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seq) {
      act_.done = seq;
      act_.done_kind = act_.kind;
    }
    act_.seq = 0;
    queued = !queue_.empty();
  }
  if (queued) cv_.notify_all();  // the comm thread may start the next collective
}

void QueuedComm::run_inline(Op& op) {
  std::exception_ptr err;
  try {
    op.work->started();
    auto p = begin(op);
    const auto t0 = Clock::now();
    const auto deadline =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
    while (!p->poll()) {
      const auto now = Clock::now();
      if (now > deadline) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          act_.reported = true;  // this thread reports it, not the comm thread's watch_caller
        }
        throw timeout_error(op);
      }
      // The caller waits anyway: poll tightly at first (the signature check of
      // ranks that arrive together takes microseconds), then yield (the core
      // goes to any other runnable thread), and only after 20 ms sleep. Sleeping
      // sooner cost 5-15% of a 16-64 MiB all-reduce (`parallm bench comm`): the
      // peers arrive milliseconds apart, and a sleeping rank (on a VM, a halted
      // vCPU) wakes late.
      if (now - t0 < std::chrono::microseconds(50)) continue;
      if (now - t0 < std::chrono::milliseconds(20))
        sched_yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  } catch (...) {
    err = std::current_exception();
  }
  if (err) {
    fail_all(err);
    set_finished(0);
  } else {
    set_finished(op.seq);
  }
  op.work->finish(err);
}

std::unique_ptr<Communicator> QueuedComm::split(int color, int key, const std::string& name) {
  std::unique_ptr<Communicator> out;
  Op op;
  op.kind = OpKind::Split;
  op.color = color;
  op.key = key;
  op.name = name.empty() ? fmt::format("{}/{}", name_, color) : name;
  op.split_out = &out;
  submit(std::move(op))->wait();
  return out;
}

WorkPtr QueuedComm::issue(OpKind kind, int64_t count, Tensor a, Tensor b, ReduceOp rop, int root, int tag) {
  Op op;
  op.kind = kind;
  op.count = count;
  op.a = std::move(a);
  op.b = std::move(b);
  op.rop = rop;
  op.root = root;
  op.tag = tag;
  return submit(std::move(op));
}

void QueuedComm::check_avg(ReduceOp rop, DType t, const char* what) const {
  PARALLM_CHECK(rop != ReduceOp::Avg || is_float(t), ShapeError, fmt::format("comm.{}", what),
                "avg needs a floating-point tensor, got {} (rank {}/{})", dtype_name(t), rank_, size_);
}

void QueuedComm::check_same_dtype(const Tensor& in, const Tensor& out, const char* what) const {
  PARALLM_CHECK(in.dtype() == out.dtype(), ShapeError, fmt::format("comm.{}", what),
                "input is {} but output is {} (rank {}/{} of group {})", dtype_name(in.dtype()),
                dtype_name(out.dtype()), rank_, size_, name_);
}

void QueuedComm::check_tag(int tag, const char* what) const {
  PARALLM_CHECK(tag >= 0 && tag < 32768, ShapeError, fmt::format("comm.{}", what), "tag {} outside [0, 32768)", tag);
}

// Non-roots of gather/scatter have no full-size tensor: they pass the total count.
int64_t QueuedComm::rooted_count(int64_t count, int root, const char* what) const {
  PARALLM_CHECK(count >= 0, ShapeError, fmt::format("comm.{}", what),
                "rank {}/{} is not the root ({}): pass the total element count (group {})", rank_, size_, root, name_);
  return count;
}

WorkPtr QueuedComm::all_reduce_async(Tensor t, ReduceOp rop) {
  check_avg(rop, t.dtype(), "all_reduce");
  const int64_t n = t.numel();
  return issue(OpKind::AllReduce, n, std::move(t), {}, rop);
}

WorkPtr QueuedComm::reduce_async(Tensor t, ReduceOp rop, int root) {
  check_root(root, "reduce");
  check_avg(rop, t.dtype(), "reduce");
  const int64_t n = t.numel();
  return issue(OpKind::Reduce, n, std::move(t), {}, rop, root);
}

WorkPtr QueuedComm::broadcast_async(Tensor t, int root) {
  check_root(root, "broadcast");
  const int64_t n = t.numel();
  return issue(OpKind::Broadcast, n, std::move(t), {}, ReduceOp::Sum, root);
}

WorkPtr QueuedComm::all_gather_async(Tensor in, Tensor out) {
  const int64_t n = out.numel();
  check_count(in, shard_of(n, size_, rank_).count, "all_gather", "input (this rank's shard)");
  check_same_dtype(in, out, "all_gather");
  return issue(OpKind::AllGather, n, std::move(in), std::move(out));
}

WorkPtr QueuedComm::gather_async(Tensor in, Tensor out, int root, int64_t count) {
  check_root(root, "gather");
  const int64_t n = rank_ == root ? out.numel() : rooted_count(count, root, "gather");
  check_count(in, shard_of(n, size_, rank_).count, "gather", "input (this rank's shard)");
  if (rank_ == root) check_same_dtype(in, out, "gather");
  return issue(OpKind::Gather, n, std::move(in), std::move(out), ReduceOp::Sum, root);
}

WorkPtr QueuedComm::scatter_async(Tensor in, Tensor out, int root, int64_t count) {
  check_root(root, "scatter");
  const int64_t n = rank_ == root ? in.numel() : rooted_count(count, root, "scatter");
  check_count(out, shard_of(n, size_, rank_).count, "scatter", "output (this rank's shard)");
  if (rank_ == root) check_same_dtype(in, out, "scatter");
  return issue(OpKind::Scatter, n, std::move(in), std::move(out), ReduceOp::Sum, root);
}

WorkPtr QueuedComm::reduce_scatter_async(Tensor in, Tensor out, ReduceOp rop) {
  const int64_t n = in.numel();
  check_count(out, shard_of(n, size_, rank_).count, "reduce_scatter", "output (this rank's shard)");
  check_same_dtype(in, out, "reduce_scatter");
  check_avg(rop, in.dtype(), "reduce_scatter");
  return issue(OpKind::ReduceScatter, n, std::move(in), std::move(out), rop);
}

WorkPtr QueuedComm::all_to_all_async(Tensor in, Tensor out) {
  const int64_t n = in.numel();
  check_count(out, n, "all_to_all", "output");
  PARALLM_CHECK(n % size_ == 0, ShapeError, "comm.all_to_all", "count {} not divisible by {} (rank {}/{} of group {})",
                n, size_, rank_, size_, name_);
  check_same_dtype(in, out, "all_to_all");
  return issue(OpKind::AllToAll, n, std::move(in), std::move(out));
}

int64_t QueuedComm::check_counts_v(const std::vector<int64_t>& counts, const Tensor& t, const char* which,
                                   const char* tensor) const {
  PARALLM_CHECK(static_cast<int64_t>(counts.size()) == size_, ShapeError, "comm.all_to_all_v",
                "{} has {} entries, expected one per rank: {} (rank {}/{} of group {})", which, counts.size(), size_,
                rank_, size_, name_);
  int64_t sum = 0;
  for (int j = 0; j < size_; ++j) {
    const int64_t c = counts[j];
    PARALLM_CHECK(c >= 0, ShapeError, "comm.all_to_all_v",
                  "{}[{}] is {}: counts cannot be negative (rank {}/{} of group {})", which, j, c, rank_, size_, name_);
    PARALLM_CHECK(c <= t.numel() - sum, ShapeError, "comm.all_to_all_v",
                  "{} add up to more than the {} elements of the {} ({}[{}] is {} after {}) (rank {}/{} of group {})",
                  which, t.numel(), tensor, which, j, c, sum, rank_, size_, name_);
    sum += c;
  }
  return sum;
}

WorkPtr QueuedComm::all_to_all_v_async(Tensor in, std::vector<int64_t> send_counts, Tensor out,
                                       std::vector<int64_t> recv_counts) {
  const int64_t sent = check_counts_v(send_counts, in, "send_counts", "input");
  check_counts_v(recv_counts, out, "recv_counts", "output");
  check_same_dtype(in, out, "all_to_all_v");
  Op op;
  op.kind = OpKind::AllToAllV;
  op.count = sent;  // what this rank sends: its OpCounts payload
  op.a = std::move(in);
  op.b = std::move(out);
  op.send_counts = std::move(send_counts);
  op.recv_counts = std::move(recv_counts);
  return submit(std::move(op));
}

WorkPtr QueuedComm::barrier_async() {
  return issue(OpKind::Barrier, 0, {}, {});
}

WorkPtr QueuedComm::send_async(Tensor t, int peer, int tag) {
  check_root(peer, "send");
  check_tag(tag, "send");
  const int64_t n = t.numel();
  return issue(OpKind::Send, n, std::move(t), {}, ReduceOp::Sum, peer, tag);
}

WorkPtr QueuedComm::recv_async(Tensor t, int peer, int tag) {
  check_root(peer, "recv");
  check_tag(tag, "recv");
  const int64_t n = t.numel();
  return issue(OpKind::Recv, n, std::move(t), {}, ReduceOp::Sum, peer, tag);
}

// ---- the communication thread ----

void QueuedComm::fail_all(std::exception_ptr err) {
  std::deque<Op> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) broken_ = err;
    rest.swap(queue_);
  }
  for (Op& op : rest) op.work->finish(err);
}

void QueuedComm::loop() {
  struct Active {
    Op op;
    std::unique_ptr<Pending> pending;  // holds a reference to op: list nodes never move
    Clock::time_point deadline;
  };
  std::list<Active> active;  // at most one collective, any number of point-to-point ops
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  auto last_service = Clock::now();
  auto last_progress_check = Clock::now();
  auto last_busy = Clock::now();
  const auto poll_sleep = poll_interval();
  const auto spin_window = std::chrono::microseconds(200);
  auto fail_active = [&](std::exception_ptr err) {
    for (Active& x : active) x.op.work->finish(err);
    active.clear();
    fail_all(err);
    set_finished(0);
  };
  for (;;) {
    // Take what may start now: point-to-point always, a collective only when none is running.
    std::vector<Op> starting;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active.empty() && queue_.empty()) {
        // Back-to-back operations (a bucket sequence, a benchmark loop) come
        // within microseconds: stay awake a moment before sleeping.
        if (Clock::now() - last_busy < std::chrono::microseconds(50)) {
          lock.unlock();
          sched_yield();
          continue;
        }
        cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) {
          if (stop_) return;
          lock.unlock();
          answer_and_watch();
          continue;
        }
      }
      bool coll_running = act_.seq != 0;
      while (!queue_.empty() && (!queue_.front().collective() || !coll_running) && !broken_) {
        if (queue_.front().collective()) {
          coll_running = true;
          set_running(queue_.front(), false);
        }
        starting.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (!starting.empty()) last_progress_check = Clock::now();
    for (size_t i = 0; i < starting.size(); ++i) {
      Active& a = active.emplace_back(Active{std::move(starting[i]), nullptr, Clock::now() + timeout});
      try {
        a.op.work->started();
        a.pending = begin(a.op);
      } catch (...) {
        const std::exception_ptr err = std::current_exception();
        for (size_t j = i + 1; j < starting.size(); ++j) starting[j].work->finish(err);  // taken, never started
        fail_active(err);
        break;
      }
    }

    for (auto it = active.begin(); it != active.end();) {
      Active& a = *it;
      bool done = false;
      try {
        done = a.pending->poll();
        if (!done && Clock::now() > a.deadline) throw timeout_error(a.op);
      } catch (...) {
        // The group is broken: fail everything in flight and queued.
        fail_active(std::current_exception());
        break;
      }
      if (!done) {
        ++it;
        continue;
      }
      if (a.op.collective()) set_finished(a.op.seq);
      a.op.work->finish(nullptr);
      it = active.erase(it);
    }
    if (!active.empty()) {
      last_busy = Clock::now();
      if (Clock::now() - last_service > std::chrono::milliseconds(10)) {
        answer_and_watch();
        last_service = Clock::now();
      }
      // Poll politely: yield for the first moments of an operation (latency)
      // or while a caller is blocked waiting for this group (its core is
      // free), else sleep between polls so compute threads keep the cores.
      if (Clock::now() - last_progress_check < spin_window || waiters_.load(std::memory_order_relaxed) > 0)
        sched_yield();
      else
        std::this_thread::sleep_for(poll_sleep);
    }
  }
}

}  // namespace parallm::comm
