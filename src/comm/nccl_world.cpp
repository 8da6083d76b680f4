// The nccl backend's world communicator (design: nccl_comm.h), and what the
// build reports of NCCL.
// - Start. Under an MPI launcher an MPI communicator carries the unique id and
//   stays as the control plane (it checks the collectives' signatures and
//   carries the messages' headers). Without MPI, rank 0 passes the id through
//   a FileStore (PARALLM_STORE_DIR) and there is no signature check. One rank
//   needs neither. Each rank takes the GPU of its local rank.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "comm/backends.h"
#include "comm/nccl_comm.h"
#include "comm/store.h"
#include "comm/topology.h"
#include "core/error.h"

namespace parallm::comm {

namespace {

using nccl_detail::nccl_ok;
using nccl_detail::NcclComm;

// The NCCL unique id as text (for the file store) and back.
std::string to_hex(const ncclUniqueId& id) {
  std::string s;
  for (char c : id.internal) s += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return s;
}

ncclUniqueId from_hex(const std::string& s, const std::string& path) {
  ncclUniqueId id{};
  PARALLM_CHECK(s.size() == 2 * sizeof(id.internal), CommError, "comm.nccl",
                "{} holds {} characters, not an NCCL unique id ({} hex digits)", path, s.size(),
                2 * sizeof(id.internal));
  for (size_t i = 0; i < sizeof(id.internal); ++i)
    id.internal[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return id;
}

}  // namespace

bool nccl_built() {
  return true;
}

std::string nccl_library_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9 (major * 1000 + ... before).
  return v >= 10000 ? fmt::format("NCCL {}.{}.{}", v / 10000, v / 100 % 100, v % 100)
                    : fmt::format("NCCL {}.{}.{}", v / 1000, v / 100 % 10, v % 100);
}

std::unique_ptr<Communicator> make_nccl_world(const CommOptions& options) {
  const int ndev = gpu::device_count();
  PARALLM_CHECK(ndev > 0, CommError, "comm.nccl", "comm.backend=nccl needs a GPU, and this process sees none");
  const EnvRank er = env_rank();
  std::unique_ptr<FileStore> store = FileStore::from_env();
  std::unique_ptr<Communicator> ctrl;
  int rank = 0, size = 1, local = 0, local_size = er.local_size;
  if (!store && launched_multi_rank() && !mpi_library_version().empty()) {
    CommOptions co = options;
    co.check_ops = false;  // the control plane checks the NCCL operations, not its own
    ctrl = make_mpi_world(co);
    rank = ctrl->rank();
    size = ctrl->size();
    const RankPlace me = discover_topology(*ctrl).me(rank);
    local = me.local_rank;
    local_size = me.local_size;
  } else if (er.size > 1) {
    PARALLM_CHECK(store, ConfigError, "comm.nccl",
                  "{} ranks (from {}) and no way to pass NCCL's unique id: build parallm with MPI and start it with an "
                  "MPI launcher, or set PARALLM_STORE_DIR to a directory every rank can read",
                  er.size, er.source);
    rank = er.rank;
    size = er.size;
    PARALLM_CHECK(er.local_rank >= 0 || ndev == 1, ConfigError, "comm.nccl",
                  "the launcher gives no local rank (LOCAL_RANK) to choose one of {} GPUs by", ndev);
    local = std::max(er.local_rank, 0);
  }
  const int device = local % ndev;
  gpu::set_device(device);
  ncclUniqueId id{};
  if (rank == 0) nccl_ok(ncclGetUniqueId(&id), "comm.nccl", "ncclGetUniqueId");
  if (ctrl) {
    static_assert(sizeof(id.internal) % 2 == 0);
    ctrl->broadcast(Tensor::view_of(id.internal, {static_cast<int64_t>(sizeof(id.internal) / 2)}, DType::U16), 0);
  } else if (store) {
    if (rank == 0)
      store->set("nccl-world", to_hex(id));
    else
      id = from_hex(store->get("nccl-world", options.timeout_s), store->path("nccl-world"));
  }
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;  // whatever NCCL_COMM_BLOCKING says: calls return when they are done
  const std::string shared = local_size > ndev
                                 ? fmt::format(
                                       "; {} ranks on this node see {} GPU{}: NCCL takes one rank per GPU, "
                                       "comm.backend=mpi runs several on one",
                                       local_size, ndev, ndev == 1 ? "" : "s")
                                 : "";
  nccl_ok(ncclCommInitRankConfig(&comm, size, id, rank, &config), "comm.nccl",
          fmt::format("ncclCommInitRank (rank {}/{}, GPU {}){}", rank, size, device, shared));
  // Every rank has joined, so the id file can go (the store removes it as it closes).
  return std::make_unique<NcclComm>(rank, size, "world", options, comm, device, std::move(ctrl));
}

}  // namespace parallm::comm
