// Communicator: the one interface every parallelism talks through.
//
// Design:
// - A communicator is a group of ranks (the world, or a sub-group made by
//   split). Every operation is issued to the group's own communication thread
//   and runs there in issue order, so compute never blocks on the network and
//   all ranks see collectives in the same order. Blocking calls are the
//   asynchronous ones followed by wait().
// - Collectives work on tensors (fp32, bf16, int32, uint16). bf16 reductions
//   accumulate in fp32. Counts need not divide by the group size: gather-like
//   and scatter-like operations use the partition `shard_of` (the first
//   count % size ranks hold one element more), which ZeRO reuses.
// - No silent hangs: every operation has a deadline (CommOptions::timeout_s).
//   Before each collective the ranks compare a signature of it (kind, count,
//   dtype, root, sequence number), so a skipped or mismatched collective is an
//   error naming the ranks involved instead of undefined behaviour; a rank
//   that never arrives is a timeout naming what each peer is doing, where it
//   can still answer. After an error the group is broken: later operations
//   fail at once with the first error. Only cli/ decides to abort().
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace parallm::comm {

enum class ReduceOp : uint8_t { Sum, Avg, Min, Max };
const char* reduce_op_name(ReduceOp op);

// The kinds of operation, as named in errors and statistics.
enum class OpKind : uint8_t {
  AllReduce,
  Reduce,
  Broadcast,
  AllGather,
  Gather,
  Scatter,
  ReduceScatter,
  AllToAll,
  AllToAllV,
  Barrier,
  Split,
  Send,
  Recv,
  SendRecv
};
const char* op_kind_name(OpKind k);
constexpr int kOpKinds = static_cast<int>(OpKind::SendRecv) + 1;

// What a group has been asked to do: per kind, the operations issued on it
// (calls) and their payload bytes, counted since the group was made or last
// reset_counts(). An operation counts once it passes its argument checks (a
// rejected call counts nothing), whether it then succeeds or fails. The
// payload is this rank's view of the operation's whole tensor, elements x
// element size, whatever the algorithm moves on the wire:
//   all_reduce, reduce, broadcast, send, recv   the tensor
//   all_gather, gather                          the whole gathered tensor (out; the total count off the root)
//   scatter                                     the whole tensor scattered (root's in; the count elsewhere)
//   reduce_scatter, all_to_all                  the input (every rank's in, whole)
//   all_to_all_v                                what this rank sends (the sum of its send_counts)
//   barrier, split                              0 (calls only)
// So every rank of a group counts the same numbers for its collectives, but
// for all_to_all_v, whose payload differs from rank to rank (the group's sum
// over ranks is the exchange's whole volume). Only
// the operations issued through this interface count: not a backend's own
// messages (the signature check, diagnosis) nor native_loop(). Counting is a
// relaxed atomic add per operation (no allocation, no lock); a reading taken
// while operations are being issued on other threads may miss those.
struct OpCounts {
  int64_t calls[kOpKinds] = {};
  int64_t bytes[kOpKinds] = {};
  int64_t calls_of(OpKind k) const { return calls[static_cast<int>(k)]; }
  int64_t bytes_of(OpKind k) const { return bytes[static_cast<int>(k)]; }
  int64_t total_calls() const;
  int64_t total_bytes() const;
  OpCounts operator-(const OpCounts& earlier) const;  // what happened between two readings
  bool operator==(const OpCounts&) const = default;
  // "all_reduce 12 calls 36864 B, all_gather 1 call 256 B" (kinds with calls only; "none" when empty).
  std::string text() const;
};

// Rank r's part of `count` elements split over `size` ranks: the first
// count % size ranks hold one element more. Never an error for any count.
struct Shard {
  int64_t offset = 0, count = 0;
};
Shard shard_of(int64_t count, int size, int rank);

struct CommOptions {
  double timeout_s = 300.0;  // per operation, from its start on the comm thread
  bool check_ops = true;     // compare collective signatures across ranks first
};

// Handle of an asynchronous operation. wait() rethrows the operation's error.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // true once finished (rethrows its error if it failed)
  // Seconds the operation ran on the communication thread (after wait()).
  virtual double seconds() const = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& group_name() const = 0;
  virtual std::string backend() const = 0;
  virtual const CommOptions& options() const = 0;
  // The GPU this rank's operations run on (nccl), or -1 (host memory only).
  virtual int gpu_device() const { return -1; }
  // "[rank r/N group]": for error messages.
  std::string where() const;

  // Collective over this group: ranks with the same color form a new group,
  // ordered by key (ties by rank). A negative color leaves this rank out
  // (returns nullptr). Every rank of this group must call it.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name = "") = 0;

  // Asynchronous operations. Tensors share storage, so the handles keep the
  // buffers alive until the operation is done; do not touch them before wait().
  // In place: `t` holds this rank's input and receives the result.
  virtual WorkPtr all_reduce_async(Tensor t, ReduceOp op) = 0;
  // Only `root` receives the result; other ranks' `t` is left as it was.
  virtual WorkPtr reduce_async(Tensor t, ReduceOp op, int root) = 0;
  virtual WorkPtr broadcast_async(Tensor t, int root) = 0;
  // `in` is this rank's shard_of(out.numel()) part; `out` gets all of them.
  // `in` may be exactly that part of `out` itself (in place).
  virtual WorkPtr all_gather_async(Tensor in, Tensor out) = 0;
  // As all_gather, with `out` only on root (others may pass an empty tensor
  // and then give the total in `count`).
  virtual WorkPtr gather_async(Tensor in, Tensor out, int root, int64_t count = -1) = 0;
  // Root's `in` (count elements) is split by shard_of; each rank gets its part in `out`.
  virtual WorkPtr scatter_async(Tensor in, Tensor out, int root, int64_t count = -1) = 0;
  // `in` has the whole count on every rank; `out` gets this rank's shard of the reduction.
  virtual WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) = 0;
  // Block j (numel / size elements) of `in` goes to rank j; block i of `out`
  // comes from rank i. numel must divide by the group size.
  virtual WorkPtr all_to_all_async(Tensor in, Tensor out) = 0;
  // Variable-count all-to-all: `in` holds, in rank order, send_counts[j]
  // elements for rank j (contiguous, in.numel() >= the sum of send_counts);
  // `out` receives recv_counts[i] elements from rank i in rank order
  // (out.numel() >= the sum of recv_counts; elements past it are left as they
  // were). Counts may be zero (an empty message still takes part: no hang).
  // send_counts.size() == recv_counts.size() == size(). Every rank's
  // send_counts[j] must equal rank j's recv_counts[this rank]: with check_ops
  // on, a disagreement is a CommError on every rank naming the ranks and
  // counts (the ranks exchange their counts after the signature check: two
  // more small messages per peer pair and a flag reduction); with check_ops
  // off, what happens is the library's.
  virtual WorkPtr all_to_all_v_async(Tensor in, std::vector<int64_t> send_counts, Tensor out,
                                     std::vector<int64_t> recv_counts) = 0;
  virtual WorkPtr barrier_async() = 0;
  // Point to point (not collectives: they may be in flight together).
  virtual WorkPtr send_async(Tensor t, int peer, int tag = 0) = 0;
  virtual WorkPtr recv_async(Tensor t, int peer, int tag = 0) = 0;

  // Blocking forms. The caller waits anyway, so a backend may run the
  // operation on the caller's thread when its queue is empty (no hand-off).
  void all_reduce(Tensor t, ReduceOp op = ReduceOp::Sum) {
    Blocking b(this);
    all_reduce_async(std::move(t), op)->wait();
  }
  void reduce(Tensor t, ReduceOp op, int root) {
    Blocking b(this);
    reduce_async(std::move(t), op, root)->wait();
  }
  void broadcast(Tensor t, int root) {
    Blocking b(this);
    broadcast_async(std::move(t), root)->wait();
  }
  void all_gather(Tensor in, Tensor out) {
    Blocking b(this);
    all_gather_async(std::move(in), std::move(out))->wait();
  }
  void gather(Tensor in, Tensor out, int root, int64_t count = -1) {
    Blocking b(this);
    gather_async(std::move(in), std::move(out), root, count)->wait();
  }
  void scatter(Tensor in, Tensor out, int root, int64_t count = -1) {
    Blocking b(this);
    scatter_async(std::move(in), std::move(out), root, count)->wait();
  }
  void reduce_scatter(Tensor in, Tensor out, ReduceOp op = ReduceOp::Sum) {
    Blocking b(this);
    reduce_scatter_async(std::move(in), std::move(out), op)->wait();
  }
  void all_to_all(Tensor in, Tensor out) {
    Blocking b(this);
    all_to_all_async(std::move(in), std::move(out))->wait();
  }
  void all_to_all_v(Tensor in, std::vector<int64_t> send_counts, Tensor out, std::vector<int64_t> recv_counts) {
    Blocking b(this);
    all_to_all_v_async(std::move(in), std::move(send_counts), std::move(out), std::move(recv_counts))->wait();
  }
  void barrier() {
    Blocking b(this);
    barrier_async()->wait();
  }
  void send(Tensor t, int peer, int tag = 0) { send_async(std::move(t), peer, tag)->wait(); }
  void recv(Tensor t, int peer, int tag = 0) { recv_async(std::move(t), peer, tag)->wait(); }

  // This group's operation counts (OpCounts above), and a fresh start for them.
  virtual OpCounts counts() const = 0;
  virtual void reset_counts() = 0;

  // Ends the whole job now (every rank of every group): what cli/ calls after
  // an error so no peer waits for this rank. Never returns for multi-rank
  // backends; a world of one just returns.
  virtual void abort(int code) = 0;

 protected:
  // The communicator whose blocking collective this thread is issuing, if any
  // (out of line: a thread_local class member read from inline code trips UBSan).
  static const Communicator*& blocking_caller();
  struct Blocking {
    explicit Blocking(const Communicator* c) { blocking_caller() = c; }
    ~Blocking() { blocking_caller() = nullptr; }
  };
};

// A process-wide hook called with an operation's timeout error (its whole
// message) on the thread that found it: the program's chance to make sure it
// ends (cli/world.cpp). `unwinds`: a CommError with that message is thrown
// next, but unwinding may block in a library call that a lost peer holds;
// false: the thread that issued the operation is stuck inside the library and
// will not return, so nothing else reports the error: the program must, and
// end itself. None by default.
using TimeoutHook = void (*)(const std::string& message, bool unwinds);
void set_timeout_hook(TimeoutHook hook);
TimeoutHook timeout_hook();

// The world communicator of a backend: "self" (one rank, no MPI), "mpi",
// "nccl" (GPUs), or "auto" (mpi when a launcher started several ranks, self
// otherwise).
std::unique_ptr<Communicator> make_world(const std::string& backend, const CommOptions& options = {});
// What "auto" means for a run on the GPU (`gpu`) or the CPU: nccl for several
// GPU ranks when parallm has NCCL, else as make_world says. Other names pass.
// Ranks sharing a GPU name mpi (device buffers staged through host memory,
// comm/device_staging.h): NCCL takes one rank per GPU.
std::string resolve_backend(const std::string& backend, bool gpu);
bool nccl_built();

// The peer a benchmark measures against: `iters` back-to-back calls of the
// library's own blocking collective (MPI_Allreduce, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Bcast from rank 0, MPI_Alltoall; sum for
// reductions) on this group, with no communication thread and no checks.
// Operands as for the async forms (all_gather/reduce_scatter/all_to_all need
// counts that divide by the group size). Returns this rank's seconds. Throws
// CommError for backends without a library underneath (self), and for kinds
// it has no loop for (all_to_all_v among them: its counts have no place here).
double native_loop(Communicator& c, OpKind kind, Tensor in, Tensor out, int iters);

// The MPI library parallm was built with (MPI_Get_library_version, first
// line), or "" when built without MPI. Safe before and without MPI_Init.
std::string mpi_library_version();
// The NCCL library linked ("NCCL 2.21.5"), or "" when built without NCCL.
std::string nccl_library_version();

}  // namespace parallm::comm
