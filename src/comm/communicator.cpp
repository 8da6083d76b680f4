#include "comm/communicator.h"

#include <atomic>
#include <cstdlib>

#include "comm/backends.h"
#include "comm/launch_env.h"
#include "core/error.h"
#include "core/log.h"

namespace parallm::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
  }
  return "?";
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::AllReduce:
      return "all_reduce";
    case OpKind::Reduce:
      return "reduce";
    case OpKind::Broadcast:
      return "broadcast";
    case OpKind::AllGather:
      return "all_gather";
    case OpKind::Gather:
      return "gather";
    case OpKind::Scatter:
      return "scatter";
    case OpKind::ReduceScatter:
      return "reduce_scatter";
    case OpKind::AllToAll:
      return "all_to_all";
    case OpKind::AllToAllV:
      return "all_to_all_v";
    case OpKind::Barrier:
      return "barrier";
    case OpKind::Split:
      return "split";
    case OpKind::Send:
      return "send";
    case OpKind::Recv:
      return "recv";
    case OpKind::SendRecv:
      return "send_recv";
  }
  return "?";
}

int64_t OpCounts::total_calls() const {
  int64_t n = 0;
  for (int64_t c : calls) n += c;
  return n;
}

int64_t OpCounts::total_bytes() const {
  int64_t n = 0;
  for (int64_t b : bytes) n += b;
  return n;
}

OpCounts OpCounts::operator-(const OpCounts& earlier) const {
  OpCounts d;
  for (int k = 0; k < kOpKinds; ++k) {
    d.calls[k] = calls[k] - earlier.calls[k];
    d.bytes[k] = bytes[k] - earlier.bytes[k];
  }
  return d;
}

std::string OpCounts::text() const {
  std::string s;
  for (int k = 0; k < kOpKinds; ++k) {
    if (calls[k] == 0) continue;
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {} call{} {} B", op_kind_name(static_cast<OpKind>(k)), calls[k], calls[k] == 1 ? "" : "s",
                     bytes[k]);
  }
  return s.empty() ? "none" : s;
}

Shard shard_of(int64_t count, int size, int rank) {
  PARALLM_CHECK(size > 0 && rank >= 0 && rank < size && count >= 0, ShapeError, "comm.shard_of",
                "bad partition: count {} over {} ranks, rank {}", count, size, rank);
  const int64_t base = count / size, extra = count % size;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

const Communicator*& Communicator::blocking_caller() {
  thread_local const Communicator* caller = nullptr;
  return caller;
}

std::string Communicator::where() const {
  return fmt::format("rank {}/{} {}", rank(), size(), group_name());
}

bool launched_multi_rank() {
  return env_rank().several();
}

namespace {
std::unique_ptr<Communicator> mpi_world(const CommOptions& options) {
  const EnvLookup env = process_env();
  if (const std::string w = missing_pmi_warning(env, env_rank(env)); !w.empty()) log::warn("[comm] {}", w);
  return make_mpi_world(options);
}
}  // namespace

namespace {
std::atomic<TimeoutHook> g_timeout_hook{nullptr};
}  // namespace

void set_timeout_hook(TimeoutHook hook) {
  g_timeout_hook.store(hook);
}

TimeoutHook timeout_hook() {
  return g_timeout_hook.load();
}

std::unique_ptr<Communicator> make_world(const std::string& backend, const CommOptions& options) {
  if (backend == "self") return make_self_world(options);
  if (backend == "mpi") return mpi_world(options);
  if (backend == "nccl") return make_nccl_world(options);
  if (backend == "auto") return launched_multi_rank() ? mpi_world(options) : make_self_world(options);
  throw ConfigError("config", fmt::format("comm.backend must be auto, self, mpi or nccl, got \"{}\"", backend));
}

std::string resolve_backend(const std::string& backend, bool gpu) {
  // One rank per GPU is NCCL's rule, but a process cannot tell ranks sharing a GPU from ranks each shown their
  // own one as device 0 (CUDA_VISIBLE_DEVICES per task): several ranks on one GPU ask for comm.backend=mpi.
  if (backend == "auto" && gpu && nccl_built() && launched_multi_rank()) return "nccl";
  return backend;
}

}  // namespace parallm::comm
