// How a group reports an operation that outlived comm.timeout_s (queued_comm.h):
// the deadline armed first through the timeout hook (the report's own I/O may
// hang on the failure it reports), then the peers asked (diagnose), every
// thread's stacks dumped and the hang record written (hang_record.h), once per
// process; and the communication thread's watch over a collective stuck on the
// caller's thread, which cannot report it itself.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "comm/hang_record.h"
#include "comm/queued_comm.h"
#include "core/trace.h"

namespace parallm::comm {

using Clock = std::chrono::steady_clock;

CommError QueuedComm::timeout_error(const Op& op) {
  const std::string what = fmt::format("timed out after {:.1f} s (comm.timeout_s)", options_.timeout_s);
  // The deadline first: the report's I/O may itself hang on the failure it reports.
  if (const TimeoutHook hook = timeout_hook()) hook(error_text(op, what), true);
  if (op.work) op.work->diagnosing(diagnose_budget_s());
  return CommError(fmt::format("comm.{}", op_kind_name(op.kind)), hang_report(op, what, options_.timeout_s, {}));
}

std::string QueuedComm::hang_report(const Op& op, const std::string& what, double waited_s,
                                    const std::function<bool()>& pending) {
  std::vector<PeerState> peers;
  const std::string diag = diagnose(op, &peers);
  std::string msg = error_text(op, diag.empty() ? what : what + "; " + diag);
  if (pending && !pending()) return msg;  // it completed meanwhile: no dump, no record
  HangRecord rec;
  rec.group = name_;
  rec.rank = rank_;
  rec.size = size_;
  rec.operation = op.describe();
  rec.waited_s = waited_s;
  rec.timeout_s = options_.timeout_s;
  rec.ranks = std::move(peers);
  rec.stacks = trace::dump_once("timeout: " + msg);
  rec.error = msg;
  if (!rec.stacks.empty()) msg += "; stacks of every thread in " + rec.stacks;
  if (const std::string path = write_hang_record(rec); !path.empty()) msg += "; what every rank was doing in " + path;
  return msg;
}

// A collective on the caller's thread that is still inside the library past the deadline and a grace (the
// signature round passed, then a peer vanished mid-transfer): the caller cannot return to report it, so this
// thread does, once, and the hook ends the process. A caller that found its own deadline (run_inline) has
// marked the collective reported.
void QueuedComm::watch_caller() {
  Op op;
  double ran = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!act_.seq || !act_.on_caller || act_.reported) return;
    ran = std::chrono::duration<double>(Clock::now() - act_.since).count();
    if (ran < options_.timeout_s + std::max(2.0, 0.1 * options_.timeout_s)) return;
    act_.reported = true;
    op = Op::outline(act_.kind, act_.seq, act_.count, act_.dtype, act_.rop, act_.root);
  }
  const std::string what = fmt::format(
      "still inside the communication library after {:.1f} s on the calling thread (comm.timeout_s {:.1f}): a peer "
      "died or stopped, or the network stalled mid-transfer",
      ran, options_.timeout_s);
  const TimeoutHook hook = timeout_hook();
  if (hook) hook(error_text(op, what), true);  // the deadline first
  const auto pending = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return act_.seq == op.seq;
  };
  const std::string msg = hang_report(op, what, ran, pending);
  if (hook && pending()) hook(fmt::format("[comm.{}] {}", op_kind_name(op.kind), msg), false);
}

}  // namespace parallm::comm
