// QueuedComm: the machinery shared by backends. Public calls validate their
// arguments on the caller's thread (errors at once, with context), then queue
// an Op for the group's communication thread. That thread starts operations in
// issue order, at most one collective at a time (so every rank starts them in
// the same order) while point-to-point operations stay in flight beside it,
// polls them through the backend, enforces each one's deadline and completes
// the handles. A backend only says how to start an op and how to poll it.
// A blocking collective issued while the queue is empty runs on the caller's
// thread instead (same ordering, checks and deadline), saving two thread
// hand-offs, which cost more than a small collective itself.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/hang_record.h"
#include "core/error.h"

namespace parallm::comm {

class QueuedComm;
struct Op;
struct StagedOperands;  // device_staging.cpp

// Completion state shared by the queue and the caller's handle.
class WorkState : public Work {
 public:
  void wait() override;
  bool test() override;
  double seconds() const override { return seconds_; }
  void started() {
    std::lock_guard<std::mutex> lock(mu_);
    t0_ = std::chrono::steady_clock::now();
    running_ = true;
  }
  void finish(std::exception_ptr err);
  // Watchdog for operations the communication thread cannot time out itself
  // (a blocking library call): wait() gives up a grace period after the
  // deadline, naming the operation. Cheap: the text is made only on expiry.
  // `waiters` counts the callers blocked in wait() on this group's work: the
  // communication thread polls without sleeping while one is (its core is idle).
  // A caller waiting longer than a second answers peers' questions in place of
  // its communication thread (which may be inside the library), and on expiry
  // asks the peers itself, so the error names a peer that cannot answer
  // (stopped, dead) even when the operation hangs mid-transfer.
  // The operation's kind, number, peer (a send's or receive's, named on expiry), count, type and reduction.
  void arm(double timeout_s, const Op& op, const std::string* group, std::atomic<int>* waiters, QueuedComm* owner);
  // The communication thread is asking the peers what they are doing after
  // this operation's deadline (for up to `budget_s`): it is not stuck, and its
  // error names the ranks, so the watchdog waits that much longer for it.
  void diagnosing(double budget_s) {
    std::lock_guard<std::mutex> lock(mu_);
    diagnosing_s_ = budget_s;
  }

 private:
  void watch(std::unique_lock<std::mutex>& lock);  // wait() with the watchdog

  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  bool running_ = false;
  double timeout_s_ = 0;
  double diagnosing_s_ = 0;  // set once the comm thread diagnoses a timeout
  OpKind kind_ = OpKind::Barrier;
  uint64_t seq_ = 0;
  int peer_ = -1;
  int64_t count_ = 0;
  DType dtype_ = DType::F32;
  ReduceOp rop_ = ReduceOp::Sum;
  const std::string* group_ = nullptr;   // the group's name (outlives the wait)
  std::atomic<int>* waiters_ = nullptr;  // the group's count of blocked callers (outlives the wait)
  QueuedComm* owner_ = nullptr;          // the group (outlives the wait)
  double seconds_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr err_;
};

struct Op {
  OpKind kind = OpKind::Barrier;
  uint64_t seq = 0;  // collectives: 1, 2, ... per group; point to point: own counter
  Tensor a, b;       // operands (meaning depends on kind)
  ReduceOp rop = ReduceOp::Sum;
  int root = 0;       // root, or the peer of send/recv
  int tag = 0;        // send/recv
  int64_t count = 0;  // total element count the op is about (all_to_all_v: this rank's sent elements)
  std::vector<int64_t> send_counts, recv_counts;  // all_to_all_v: one per rank of the group
  int color = 0, key = 0;
  std::string name;                            // split: name of the new group
  std::unique_ptr<Communicator>* split_out{};  // split: where the result goes
  std::shared_ptr<WorkState> work;
  std::shared_ptr<void> ext;  // the backend's own state, set by issued()
  // Device operands a host-only backend carries through host memory (device_staging.h); a and b are then their
  // host stand-ins.
  std::shared_ptr<StagedOperands> staged;

  // Element type: of the output for scatter (non-roots pass no input), else of the input.
  DType dtype() const { return kind == OpKind::Scatter ? b.dtype() : a.dtype(); }
  bool collective() const { return kind != OpKind::Send && kind != OpKind::Recv; }
  // "all_reduce #12 (1024 x fp32, sum)"
  std::string describe() const;
  // An operation as far as describe() needs it, without operands (another rank's signature, an operation named on
  // expiry): the type through empty views.
  static Op outline(OpKind kind, uint64_t seq, int64_t count, DType dtype, ReduceOp rop, int root);
};

// all_to_all_v's counts on every rank of a group of `n`, in rank order: rank
// r's send_counts, then its recv_counts (2n each). The pairs that disagree,
// "rank 0 sends 3 elements to rank 1, which expects 2 from it", joined by
// "; " (the first `max_pairs`, then how many more); "" when all agree.
std::string all_to_all_v_disagreement(const int64_t* rows, int n, int max_pairs = 8);

// An operation the backend has started; poll() returns true once it is done
// and throws (CommError) if it failed.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual bool poll() = 0;
};

class QueuedComm : public Communicator {
 public:
  QueuedComm(int rank, int size, std::string name, CommOptions options);
  ~QueuedComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& group_name() const override { return name_; }
  const CommOptions& options() const override { return options_; }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name = "") override;
  WorkPtr all_reduce_async(Tensor t, ReduceOp op) override;
  WorkPtr reduce_async(Tensor t, ReduceOp op, int root) override;
  WorkPtr broadcast_async(Tensor t, int root) override;
  WorkPtr all_gather_async(Tensor in, Tensor out) override;
  WorkPtr gather_async(Tensor in, Tensor out, int root, int64_t count = -1) override;
  WorkPtr scatter_async(Tensor in, Tensor out, int root, int64_t count = -1) override;
  WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) override;
  WorkPtr all_to_all_async(Tensor in, Tensor out) override;
  WorkPtr all_to_all_v_async(Tensor in, std::vector<int64_t> send_counts, Tensor out,
                             std::vector<int64_t> recv_counts) override;
  WorkPtr barrier_async() override;
  WorkPtr send_async(Tensor t, int peer, int tag = 0) override;
  WorkPtr recv_async(Tensor t, int peer, int tag = 0) override;
  OpCounts counts() const override;
  void reset_counts() override;

 protected:
  // Backend hooks, called on the communication thread (start, poll and
  // diagnose also on a caller running a blocking collective inline; service
  // may then run on both threads at once and must guard itself).
  virtual std::unique_ptr<Pending> start(Op& op) = 0;
  virtual void service() {}  // answer peers' questions while waiting
  // On a timeout: what the peers are doing (a sentence), and each rank's state into `peers` where the backend can
  // ask (the hang record).
  virtual std::string diagnose(const Op&, std::vector<PeerState>* /*peers*/) { return ""; }
  // How long diagnose() may wait for the peers' answers: short next to the
  // waiter's watchdog grace (max(2 s, timeout / 10)), so a peer that cannot
  // answer (stopped, dead) is named before the watchdog gives up unnamed.
  double diagnose_budget_s() const { return std::min(5.0, std::max(1.0, 0.05 * options_.timeout_s)); }
  virtual bool threaded() const { return true; }  // false: run ops inline on the caller
  // true: the backend takes host tensors only, and device operands are staged through host memory for it
  // (device_staging.h); false: it takes device tensors itself.
  virtual bool host_only() const { return true; }
  // On the caller's thread as an operation is issued, before it is queued
  // (e.g. to mark where the caller's GPU work stands); may throw.
  virtual void issued(Op&) {}
  virtual void thread_started() {}  // first thing on the communication thread
  bool broken();                    // an operation failed: the group is unusable
  friend class WorkState;           // a waiter answers and diagnoses when this thread is stuck
  // Derived constructors call start_thread() last and destructors stop_thread() first.
  void start_thread();
  void stop_thread();

  // What this rank is doing, for peers' diagnosis.
  struct Activity {
    uint64_t done = 0;  // last finished collective
    uint64_t seq = 0;   // collective in progress (0: none)
    OpKind kind = OpKind::Barrier;
    int64_t count = 0;
    DType dtype = DType::F32;
    ReduceOp rop = ReduceOp::Sum;
    int root = 0;
    OpKind done_kind = OpKind::Barrier;
    std::chrono::steady_clock::time_point since{};  // when `seq` started
    bool on_caller = false;                         // `seq` runs on the caller's thread (run_inline)
    bool reported = false;                          // watch_caller() reported it stuck
  };
  Activity activity();
  std::string error_text(const Op& op, const std::string& what) const;

 private:
  WorkPtr submit(Op op);
  std::unique_ptr<Pending> begin(Op& op);  // start(op), through the staging of device operands where it has them
  void run_inline(Op& op);                 // a blocking collective on the caller's thread (slot already taken)
  void set_running(const Op& op, bool on_caller);
  void set_finished(uint64_t seq);
  CommError timeout_error(const Op& op);  // asks the peers what they are doing (diagnose)
  // The error text of an operation found expired after `waited_s`: `what`, the peers' states (diagnose), where the
  // stacks and the hang record went (written here).
  // Asks `pending` (when given) after the diagnosis: false (the operation completed meanwhile) skips the dump and
  // the record.
  std::string hang_report(const Op& op, const std::string& what, double waited_s, const std::function<bool()>& pending);
  // On the comm thread: a collective running on the caller's thread (inside a blocking library call, so its own
  // deadline cannot fire) past comm.timeout_s + grace is reported through the timeout hook, which must end the
  // process (the caller never returns).
  void watch_caller();
  void answer_and_watch() {  // the comm thread's duties while it waits
    service();
    watch_caller();
  }
  WorkPtr issue(OpKind kind, int64_t count, Tensor a, Tensor b, ReduceOp rop = ReduceOp::Sum, int root = 0,
                int tag = 0);
  void loop();
  void fail_all(std::exception_ptr err);
  void check_root(int root, const char* what) const;
  void check_count(const Tensor& t, int64_t want, const char* op, const char* which) const;
  void check_avg(ReduceOp rop, DType t, const char* what) const;
  void check_same_dtype(const Tensor& in, const Tensor& out, const char* what) const;
  void check_tag(int tag, const char* what) const;
  // all_to_all_v: one count per rank, none negative, their sum within `t`; returns the sum.
  int64_t check_counts_v(const std::vector<int64_t>& counts, const Tensor& t, const char* which,
                         const char* tensor) const;
  int64_t rooted_count(int64_t count, int root, const char* what) const;

  int rank_, size_;
  std::string name_;
  std::atomic<int> waiters_{0};  // callers blocked in wait() on this group's work
  // OpCounts, added on the issuing caller's thread (any thread may issue).
  std::atomic<int64_t> calls_[kOpKinds]{}, bytes_[kOpKinds]{};
  CommOptions options_;
  uint64_t next_coll_ = 1, next_p2p_ = 1;

  std::mutex mu_;
  std::condition_variable cv_;
  Activity act_;  // guarded by mu_; act_.seq != 0 while a collective runs (either thread)
  std::deque<Op> queue_;
  bool stop_ = false;
  std::exception_ptr broken_;  // first error: the group is unusable afterwards
  std::thread thread_;
  bool thread_exited_ = false;  // guarded by mu_: loop() returned
  std::condition_variable exited_cv_;
};

}  // namespace parallm::comm
