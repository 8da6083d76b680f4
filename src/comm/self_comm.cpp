// The "self" backend: a group of one rank, no MPI. Every operation is what
// the collective means for one rank (reductions and broadcasts leave the data
// as it is, gathers copy), done inline on the caller's thread.
#include <cstring>

#include "comm/backends.h"
#include "comm/queued_comm.h"
#include "core/error.h"

namespace parallm::comm {

namespace {

class Done : public Pending {
 public:
  bool poll() override { return true; }
};

class SelfComm : public QueuedComm {
 public:
  SelfComm(std::string name, CommOptions options) : QueuedComm(0, 1, std::move(name), options) {}
  std::string backend() const override { return "self"; }
  void abort(int) override {}

 protected:
  bool threaded() const override { return false; }

  std::unique_ptr<Pending> start(Op& op) override {
    switch (op.kind) {
      case OpKind::AllGather:
      case OpKind::Gather:
      case OpKind::Scatter:
      case OpKind::ReduceScatter:
      case OpKind::AllToAll:
        if (op.a.nbytes() > 0 && op.a.raw() != op.b.raw()) std::memmove(op.b.raw(), op.a.raw(), op.a.nbytes());
        break;
      case OpKind::AllToAllV: {
        // The one rank sends to itself: both counts must agree (checked whatever check_ops says:
        // there is no library here, and a larger send would write past what `out` was promised).
        const int64_t rows[2] = {op.send_counts[0], op.recv_counts[0]};
        const std::string bad = all_to_all_v_disagreement(rows, 1);
        if (!bad.empty()) throw CommError("comm.all_to_all_v", error_text(op, "all_to_all_v counts disagree: " + bad));
        const size_t bytes = static_cast<size_t>(op.count) * dtype_size(op.dtype());
        if (bytes > 0 && op.a.raw() != op.b.raw()) std::memmove(op.b.raw(), op.a.raw(), bytes);
        break;
      }
      case OpKind::Split:
        *op.split_out = op.color < 0 ? nullptr : std::make_unique<SelfComm>(op.name, options());
        break;
      case OpKind::Send:
      case OpKind::Recv:
        throw CommError(fmt::format("comm.{}", op_kind_name(op.kind)),
                        error_text(op, "a group of one rank has no peer to exchange with"));
      default:  // all_reduce, reduce, broadcast (every op is an identity on one rank), barrier
        break;
    }
    return std::make_unique<Done>();
  }
};

}  // namespace

std::unique_ptr<Communicator> make_self_world(const CommOptions& options) {
  return std::make_unique<SelfComm>("world", options);
}

}  // namespace parallm::comm
