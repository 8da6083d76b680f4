// repro.json's record (repro.h), built from the session and what the layers
// below report of themselves.
#include "train/records/repro.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "comm/topology.h"
#include "core/build_info.h"
#include "core/env.h"
#include "core/gpu.h"
#include "core/text.h"
#include "kernels/matmul.h"
#include "train/session.h"

namespace parallm::train {

namespace {

nlohmann::json build_json() {
  const BuildInfo& b = build_info();
  return {{"git_revision", b.git_revision},
          {"git_describe", b.git_describe},
          {"git_dirty", b.git_dirty},
          {"build_type", b.build_type},
          {"compiler", b.compiler},
          {"cxx_flags", b.cxx_flags},
          {"sanitizers", b.sanitizers},
          {"cuda", b.cuda},
          {"cuda_architectures", b.cuda_architectures},
          {"cuda_toolkit", b.cuda_toolkit},
          {"nccl", b.nccl},
          {"cudnn", b.cudnn}};
}

nlohmann::json libraries_json() {
  return {{"mpi", comm::mpi_library_version()},
          {"nccl", comm::nccl_library_version()},
          {"onednn", kernels::gemm_library()},
          {"cuda", build_info().cuda ? gpu::version() : ""}};
}

// World size, backend, mesh, and where each rank runs with its coordinates.
nlohmann::json layout_json(const Session& s) {
  const parallel::MeshDims& d = s.mesh->dims();
  const comm::Topology topo = comm::topology_from_hosts(s.invocation.hosts);
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < s.world.size(); ++r) {
    const parallel::MeshCoord c = s.mesh->coord_of(r);
    const comm::RankPlace& p = topo.me(r);
    ranks.push_back({{"rank", r},
                     {"host", p.host},
                     {"node", p.node},
                     {"local_rank", p.local_rank},
                     {"dp", c.dp},
                     {"tp", c.tp},
                     {"pp", c.pp},
                     {"cp", c.cp}});
  }
  return {{"world_size", s.world.size()},
          {"nodes", topo.nodes.size()},
          {"backend", s.world.backend()},
          {"device", s.dev.str()},
          {"mesh", {{"dp", d.dp}, {"tp", d.tp}, {"pp", d.pp}, {"cp", d.cp}, {"ep", d.ep}}},
          {"ranks", ranks}};
}

}  // namespace

const std::vector<std::string>& repro_env_prefixes() {
  static const std::vector<std::string> p = {"PARALLM_",
                                             "LOG_FROM_ALL_RANKS",
                                             "OMP_",
                                             "GOMP_",
                                             "KMP_",
                                             "OPENBLAS_",
                                             "MKL_",
                                             "DNNL_",
                                             "ONEDNN_",
                                             "CUDA_VISIBLE_DEVICES",
                                             "CUDA_DEVICE_ORDER",
                                             "CUDA_LAUNCH_BLOCKING",
                                             "NCCL_",
                                             "UCX_",
                                             "OMPI_COMM_WORLD_",
                                             "OMPI_MCA_",
                                             "PMI_RANK",
                                             "PMI_SIZE",
                                             "PMIX_RANK",
                                             "MPI_LOCALRANKID",
                                             "SLURM_JOB_ID",
                                             "SLURM_JOB_NAME",
                                             "SLURM_JOB_NODELIST",
                                             "SLURM_JOB_NUM_NODES",
                                             "SLURM_JOB_PARTITION",
                                             "SLURM_ARRAY_",
                                             "SLURM_STEP_ID",
                                             "SLURM_NTASKS",
                                             "SLURM_CPUS_PER_TASK",
                                             "SLURM_RESTART_COUNT",
                                             "PBS_JOBID",
                                             "PBS_JOBNAME",
                                             "PBS_QUEUE"};
  return p;
}

nlohmann::json repro_record(const Session& s) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : env::with_prefixes(repro_env_prefixes())) env[k] = v;
  std::error_code ec;
  const std::string cwd = std::filesystem::current_path(ec).string();
  return {{"time_utc", utc_timestamp()}, {"cwd", ec ? "" : cwd},  {"argv", s.invocation.argv},
          {"config", s.cfg.to_json()},   {"build", build_json()}, {"libraries", libraries_json()},
          {"layout", layout_json(s)},    {"environment", env}};
}

}  // namespace parallm::train
