#include "comm/queued_comm.h"

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <list>
#include <utility>

#include "core/error.h"

namespace parallm::comm {

namespace {
using Clock = std::chrono::steady_clock;

bool is_float(DType t) {
  return t == DType::F32 || t == DType::BF16;
}
}  // namespace

// ---- WorkState ----

void WorkState::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (err_) std::rethrow_exception(err_);
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
    default:
      return s + fmt::format(" ({} x {})", count, dtype_name(dtype()));
  }
}

// ---- QueuedComm: validation on the caller's thread ----

QueuedComm::QueuedComm(int rank, int size, std::string name, CommOptions options)
    : rank_(rank), size_(size), name_(std::move(name)), options_(options) {
  PARALLM_CHECK(options_.timeout_s > 0, ConfigError, "comm", "comm.timeout_s must be positive, got {}",
                options_.timeout_s);
}

QueuedComm::~QueuedComm() {
  stop_thread();
}

void QueuedComm::start_thread() {
  if (threaded()) thread_ = std::thread([this] { loop(); });
}

void QueuedComm::stop_thread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
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
  const char* kind = op_kind_name(op.kind);
  if (op.collective() || op.kind == OpKind::Send || op.kind == OpKind::Recv) {
    for (const Tensor* t : {&op.a, &op.b})
      PARALLM_CHECK(!t->defined() || t->numel() == 0 || t->device().is_cpu(), ShapeError, fmt::format("comm.{}", kind),
                    "backend {} needs host tensors (rank {}/{})", backend(), rank_, size_);
  }
  op.work = std::make_shared<WorkState>();
  WorkPtr handle = op.work;
  if (!threaded()) {
    op.seq = op.collective() ? next_coll_++ : next_p2p_++;
    try {
      op.work->started();
      auto p = start(op);
      while (!p->poll()) {
      }
      op.work->finish(nullptr);
    } catch (...) {
      op.work->finish(std::current_exception());
    }
    return handle;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) {
    op.work->finish(broken_);
    return handle;
  }
  op.seq = op.collective() ? next_coll_++ : next_p2p_++;
  queue_.push_back(std::move(op));
  cv_.notify_all();
  return handle;
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

WorkPtr QueuedComm::all_reduce_async(Tensor t, ReduceOp rop) {
  PARALLM_CHECK(rop != ReduceOp::Avg || is_float(t.dtype()), ShapeError, "comm.all_reduce",
                "avg needs a floating-point tensor, got {} (rank {}/{})", dtype_name(t.dtype()), rank_, size_);
  Op op;
  op.kind = OpKind::AllReduce;
  op.count = t.numel();
  op.a = std::move(t);
  op.rop = rop;
  return submit(std::move(op));
}

WorkPtr QueuedComm::reduce_async(Tensor t, ReduceOp rop, int root) {
  check_root(root, "reduce");
  PARALLM_CHECK(rop != ReduceOp::Avg || is_float(t.dtype()), ShapeError, "comm.reduce",
                "avg needs a floating-point tensor, got {} (rank {}/{})", dtype_name(t.dtype()), rank_, size_);
  Op op;
  op.kind = OpKind::Reduce;
  op.count = t.numel();
  op.a = std::move(t);
  op.rop = rop;
  op.root = root;
  return submit(std::move(op));
}

WorkPtr QueuedComm::broadcast_async(Tensor t, int root) {
  check_root(root, "broadcast");
  Op op;
  op.kind = OpKind::Broadcast;
  op.count = t.numel();
  op.a = std::move(t);
  op.root = root;
  return submit(std::move(op));
}

WorkPtr QueuedComm::all_gather_async(Tensor in, Tensor out) {
  check_count(in, shard_of(out.numel(), size_, rank_).count, "all_gather", "input (this rank's shard)");
  PARALLM_CHECK(in.dtype() == out.dtype(), ShapeError, "comm.all_gather", "input is {} but output is {}",
                dtype_name(in.dtype()), dtype_name(out.dtype()));
  Op op;
  op.kind = OpKind::AllGather;
  op.count = out.numel();
  op.a = std::move(in);
  op.b = std::move(out);
  return submit(std::move(op));
}

WorkPtr QueuedComm::gather_async(Tensor in, Tensor out, int root, int64_t count) {
  check_root(root, "gather");
  if (rank_ == root) count = out.numel();
  PARALLM_CHECK(count >= 0, ShapeError, "comm.gather",
                "rank {}/{} is not the root: pass the total element count (group {})", rank_, size_, name_);
  check_count(in, shard_of(count, size_, rank_).count, "gather", "input (this rank's shard)");
  PARALLM_CHECK(rank_ != root || in.dtype() == out.dtype(), ShapeError, "comm.gather", "input is {} but output is {}",
                dtype_name(in.dtype()), dtype_name(out.dtype()));
  Op op;
  op.kind = OpKind::Gather;
  op.count = count;
  op.a = std::move(in);
  op.b = std::move(out);
  op.root = root;
  return submit(std::move(op));
}

WorkPtr QueuedComm::scatter_async(Tensor in, Tensor out, int root, int64_t count) {
  check_root(root, "scatter");
  if (rank_ == root) count = in.numel();
  PARALLM_CHECK(count >= 0, ShapeError, "comm.scatter",
                "rank {}/{} is not the root: pass the total element count (group {})", rank_, size_, name_);
  check_count(out, shard_of(count, size_, rank_).count, "scatter", "output (this rank's shard)");
  PARALLM_CHECK(rank_ != root || in.dtype() == out.dtype(), ShapeError, "comm.scatter", "input is {} but output is {}",
                dtype_name(in.dtype()), dtype_name(out.dtype()));
  Op op;
  op.kind = OpKind::Scatter;
  op.count = count;
  op.a = std::move(in);
  op.b = std::move(out);
  op.root = root;
  return submit(std::move(op));
}

WorkPtr QueuedComm::reduce_scatter_async(Tensor in, Tensor out, ReduceOp rop) {
  check_count(out, shard_of(in.numel(), size_, rank_).count, "reduce_scatter", "output (this rank's shard)");
  PARALLM_CHECK(in.dtype() == out.dtype(), ShapeError, "comm.reduce_scatter", "input is {} but output is {}",
                dtype_name(in.dtype()), dtype_name(out.dtype()));
  PARALLM_CHECK(rop != ReduceOp::Avg || is_float(in.dtype()), ShapeError, "comm.reduce_scatter",
                "avg needs a floating-point tensor, got {} (rank {}/{})", dtype_name(in.dtype()), rank_, size_);
  Op op;
  op.kind = OpKind::ReduceScatter;
  op.count = in.numel();
  op.a = std::move(in);
  op.b = std::move(out);
  op.rop = rop;
  return submit(std::move(op));
}

WorkPtr QueuedComm::all_to_all_async(Tensor in, Tensor out) {
  check_count(out, in.numel(), "all_to_all", "output");
  PARALLM_CHECK(in.numel() % size_ == 0, ShapeError, "comm.all_to_all",
                "count {} not divisible by {} (rank {}/{} of group {})", in.numel(), size_, rank_, size_, name_);
  PARALLM_CHECK(in.dtype() == out.dtype(), ShapeError, "comm.all_to_all", "input is {} but output is {}",
                dtype_name(in.dtype()), dtype_name(out.dtype()));
  Op op;
  op.kind = OpKind::AllToAll;
  op.count = in.numel();
  op.a = std::move(in);
  op.b = std::move(out);
  return submit(std::move(op));
}

WorkPtr QueuedComm::barrier_async() {
  Op op;
  op.kind = OpKind::Barrier;
  return submit(std::move(op));
}

WorkPtr QueuedComm::send_async(Tensor t, int peer, int tag) {
  check_root(peer, "send");
  PARALLM_CHECK(tag >= 0 && tag < 32768, ShapeError, "comm.send", "tag {} outside [0, 32768)", tag);
  Op op;
  op.kind = OpKind::Send;
  op.count = t.numel();
  op.a = std::move(t);
  op.root = peer;
  op.tag = tag;
  return submit(std::move(op));
}

WorkPtr QueuedComm::recv_async(Tensor t, int peer, int tag) {
  check_root(peer, "recv");
  PARALLM_CHECK(tag >= 0 && tag < 32768, ShapeError, "comm.recv", "tag {} outside [0, 32768)", tag);
  Op op;
  op.kind = OpKind::Recv;
  op.count = t.numel();
  op.a = std::move(t);
  op.root = peer;
  op.tag = tag;
  return submit(std::move(op));
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
  static const auto poll_sleep = std::chrono::microseconds([] {
    const char* v = std::getenv("PARALLM_COMM_POLL_US");
    return v ? std::atoi(v) : 50;
  }());
  const auto spin_window = std::chrono::microseconds(200);
  auto fail_active = [&](std::exception_ptr err) {
    for (Active& x : active) x.op.work->finish(err);
    active.clear();
    current_ = nullptr;
    fail_all(err);
  };
  for (;;) {
    // Take what may start now: point-to-point always, a collective only when none is running.
    std::vector<Op> starting;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active.empty() && queue_.empty()) {
        cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) {
          if (stop_) return;
          lock.unlock();
          service();
          continue;
        }
      }
      bool coll_running = current_ != nullptr;
      while (!queue_.empty() && (!queue_.front().collective() || !coll_running) && !broken_) {
        coll_running |= queue_.front().collective();
        starting.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (!starting.empty()) last_progress_check = Clock::now();
    for (Op& op : starting) {
      Active& a = active.emplace_back(Active{std::move(op), nullptr, Clock::now() + timeout});
      try {
        a.op.work->started();
        a.pending = start(a.op);
        if (a.op.collective()) current_ = &a.op;
      } catch (...) {
        fail_active(std::current_exception());
        break;
      }
    }

    for (auto it = active.begin(); it != active.end();) {
      Active& a = *it;
      bool done = false;
      try {
        done = a.pending->poll();
        if (!done && Clock::now() > a.deadline) {
          const std::string diag = diagnose(a.op);
          throw CommError(fmt::format("comm.{}", op_kind_name(a.op.kind)),
                          error_text(a.op, fmt::format("timed out after {:.1f} s (comm.timeout_s){}",
                                                       options_.timeout_s, diag.empty() ? "" : "; " + diag)));
        }
      } catch (...) {
        // The group is broken: fail everything in flight and queued.
        fail_active(std::current_exception());
        break;
      }
      if (!done) {
        ++it;
        continue;
      }
      if (a.op.collective()) {
        coll_done_ = a.op.seq;
        current_ = nullptr;
      }
      a.op.work->finish(nullptr);
      it = active.erase(it);
    }
    if (!active.empty()) {
      if (Clock::now() - last_service > std::chrono::milliseconds(10)) {
        service();
        last_service = Clock::now();
      }
      // Poll politely: yield for the first moments of an operation (latency),
      // then sleep between polls so compute threads keep the cores.
      if (Clock::now() - last_progress_check < spin_window)
        sched_yield();
      else
        std::this_thread::sleep_for(poll_sleep);
    }
  }
}

}  // namespace parallm::comm
