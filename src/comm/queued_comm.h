// QueuedComm: the machinery shared by backends. Public calls validate their
// arguments on the caller's thread (errors at once, with context), then queue
// an Op for the group's communication thread. That thread starts operations in
// issue order, at most one collective at a time (so every rank starts them in
// the same order) while point-to-point operations stay in flight beside it,
// polls them through the backend, enforces each one's deadline and completes
// the handles. A backend only says how to start an op and how to poll it.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace parallm::comm {

// Completion state shared by the queue and the caller's handle.
class WorkState : public Work {
 public:
  void wait() override;
  bool test() override;
  double seconds() const override { return seconds_; }
  void started() { t0_ = std::chrono::steady_clock::now(); }
  void finish(std::exception_ptr err);

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
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
  int64_t count = 0;  // total element count the op is about
  int color = 0, key = 0;
  std::string name;                            // split: name of the new group
  std::unique_ptr<Communicator>* split_out{};  // split: where the result goes
  std::shared_ptr<WorkState> work;

  // Element type: of the output for scatter (non-roots pass no input), else of the input.
  DType dtype() const { return kind == OpKind::Scatter ? b.dtype() : a.dtype(); }
  bool collective() const { return kind != OpKind::Send && kind != OpKind::Recv; }
  // "all_reduce #12 (1024 x fp32, sum)"
  std::string describe() const;
};

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
  WorkPtr barrier_async() override;
  WorkPtr send_async(Tensor t, int peer, int tag = 0) override;
  WorkPtr recv_async(Tensor t, int peer, int tag = 0) override;

 protected:
  // Backend hooks, all called on the communication thread.
  virtual std::unique_ptr<Pending> start(Op& op) = 0;
  virtual void service() {}                               // answer peers' questions while waiting
  virtual std::string diagnose(const Op&) { return ""; }  // on a timeout: what the peers are doing
  virtual bool threaded() const { return true; }          // false: run ops inline on the caller
  // Derived constructors call start_thread() last and destructors stop_thread() first.
  void start_thread();
  void stop_thread();

  // What this rank is doing, for peers' diagnosis (read on the comm thread).
  uint64_t coll_done_ = 0;       // last finished collective
  const Op* current_ = nullptr;  // collective in progress, if any
  std::string error_text(const Op& op, const std::string& what) const;

 private:
  WorkPtr submit(Op op);
  WorkPtr issue(OpKind kind, int64_t count, Tensor a, Tensor b, ReduceOp rop = ReduceOp::Sum, int root = 0,
                int tag = 0);
  void loop();
  void fail_all(std::exception_ptr err);
  void check_root(int root, const char* what) const;
  void check_count(const Tensor& t, int64_t want, const char* op, const char* which) const;
  void check_avg(ReduceOp rop, DType t, const char* what) const;
  void check_same_dtype(const Tensor& in, const Tensor& out, const char* what) const;
  void check_tag(int tag, const char* what) const;
  int64_t rooted_count(int64_t count, int root, const char* what) const;

  int rank_, size_;
  std::string name_;
  CommOptions options_;
  uint64_t next_coll_ = 1, next_p2p_ = 1;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stop_ = false;
  std::exception_ptr broken_;  // first error: the group is unusable afterwards
  std::thread thread_;
};

}  // namespace parallm::comm
