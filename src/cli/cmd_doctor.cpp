// `parallm doctor`: is every rank able to compute and talk to every other?
// Each rank allocates and touches memory, joins an all-reduce and a barrier,
// then exchanges a message with every other rank (in n-1 shifted rounds, so
// every pair is tried and a silent peer is named), and prints its own verdict
// "[host-local_rank] is OK (global rank r/N)" or what failed. Rank 0 adds the
// library versions and a summary. GPUs, where there are any: doctor_gpu.h. Exit code 1 on any failure; a peer that
// never answers makes the survivors fail after --timeout seconds.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "cli/commands.h"
#include "cli/doctor_gpu.h"
#include "cli/options.h"
#include "cli/world.h"
#include "core/error.h"
#include "core/host.h"
#include "core/threads.h"
#include "kernels/matmul.h"

namespace parallm::cli {

namespace {

struct DoctorOptions {
  std::string backend = "auto";
  double timeout_s = 30;
  int64_t mem_mb = 256;
  int64_t msg_bytes = 1 << 20;
  GpuCheckOptions gpu;
};

int doctor(const DoctorOptions& o) {
  PARALLM_CHECK(o.mem_mb > 0 && o.msg_bytes >= 4, ConfigError, "doctor", "--mem-mb must be positive and --bytes >= 4");
  const uint64_t have = physical_memory_bytes();
  PARALLM_CHECK(have == 0 || static_cast<uint64_t>(o.mem_mb) << 20 <= have, ConfigError, "doctor",
                "--mem-mb {} is more than this machine's memory ({} MiB); give at most that", o.mem_mb, have >> 20);
  comm::CommOptions copt;
  copt.timeout_s = o.timeout_s;
  World w = start_world(o.backend, copt);
  comm::Communicator& c = *w;
  const int n = c.size(), me = c.rank();
  const comm::RankPlace& place = w.topo.me(me);
  if (me == 0) {
    std::printf("doctor: parallm 0.1.0, %s, kernels %s, compiler %s\n", kernels::gemm_library().c_str(),
                kernels::cpu_kernel_isa().c_str(), __VERSION__);
    const std::string mpi = comm::mpi_library_version();
    std::printf("doctor: backend %s, MPI library %s\n", c.backend().c_str(), mpi.empty() ? "(none)" : mpi.c_str());
    std::printf("doctor: %d rank%s on %zu node%s, %d OpenMP thread%s per rank, %u cores on %s\n", n, n == 1 ? "" : "s",
                w.topo.nodes.size(), w.topo.nodes.size() == 1 ? "" : "s", num_threads(), num_threads() == 1 ? "" : "s",
                std::thread::hardware_concurrency(), w.host.c_str());
    std::fflush(stdout);
  }
  std::vector<std::string> problems;
  auto attempt = [&](const std::string& what, const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      problems.push_back(fmt::format("{}: {}", what, e.what()));
    }
  };
  attempt("memory", [&] {
    Tensor t = Tensor::empty({o.mem_mb << 18}, DType::F32);  // zero-filled: every page touched
    float* p = t.data<float>();
    p[t.numel() - 1] = 1.0f;
    PARALLM_CHECK(p[0] == 0.0f && p[t.numel() - 1] == 1.0f, InternalError, "doctor", "memory reads back wrong");
  });
  const std::string who = fmt::format("[{}-{}]", place.host, place.local_rank);
  for (const std::string& line : check_gpus(place, o.gpu, problems)) std::printf("%s %s\n", who.c_str(), line.c_str());
  std::fflush(stdout);
  attempt("all_reduce", [&] {
    Tensor t = Tensor::empty({1024}, DType::F32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(me + 1);
    c.all_reduce(t, comm::ReduceOp::Sum);
    const float want = static_cast<float>(n) * (n + 1) / 2;
    for (int64_t i = 0; i < t.numel(); ++i)
      PARALLM_CHECK(t.data<float>()[i] == want, CommError, "doctor", "all_reduce gave {} at {}, expected {}",
                    t.data<float>()[i], i, want);
  });
  attempt("barrier", [&] { c.barrier(); });
  // Shifted rounds: in round k every rank sends to me+k and receives from me-k.
  const int64_t cnt = o.msg_bytes / 4;
  Tensor out = Tensor::empty({cnt}, DType::I32), in = Tensor::empty({cnt}, DType::I32);
  for (int k = 1; k < n && problems.empty(); ++k) {
    const int to = (me + k) % n, from = (me - k + n) % n;
    attempt(fmt::format("send/recv with rank {} and rank {}", to, from), [&] {
      for (int64_t i = 0; i < cnt; ++i) out.data<int32_t>()[i] = me * 1000003 + static_cast<int32_t>(i);
      auto r = c.recv_async(in, from, 1);
      auto s = c.send_async(out, to, 1);
      s->wait();
      r->wait();
      for (int64_t i = 0; i < cnt; ++i)
        PARALLM_CHECK(in.data<int32_t>()[i] == from * 1000003 + static_cast<int32_t>(i), CommError, "doctor",
                      "message from rank {} corrupted at element {}", from, i);
    });
  }
  if (problems.empty()) {
    std::printf("%s is OK (global rank %d/%d)\n", who.c_str(), me, n);
  } else {
    for (const auto& p : problems) std::printf("%s is BROKEN (global rank %d/%d): %s\n", who.c_str(), me, n, p.c_str());
  }
  std::fflush(stdout);
  // A summary only when the group still works; otherwise every rank has said its part.
  int bad_ranks = -1;
  try {
    Tensor f = Tensor::empty({1}, DType::I32);
    f.data<int32_t>()[0] = problems.empty() ? 0 : 1;
    c.all_reduce(f, comm::ReduceOp::Sum);
    bad_ranks = f.data<int32_t>()[0];
  } catch (const Error&) {
  }
  if (me == 0 && bad_ranks == 0) std::printf("doctor: all %d rank%s OK\n", n, n == 1 ? "" : "s");
  if (me == 0 && bad_ranks > 0) std::printf("doctor: %d of %d ranks reported problems\n", bad_ranks, n);
  std::fflush(stdout);
  if (!problems.empty() || bad_ranks != 0) {
    if (n > 1 && bad_ranks < 0) c.abort(1);  // a broken group: end every rank now
    return 1;
  }
  return 0;
}

}  // namespace

Runner add_doctor(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor",
                                 "Check that every rank can allocate, all-reduce, barrier and reach every "
                                 "other rank");
  auto o = std::make_shared<DoctorOptions>();
  add_world_options(cmd, o->backend, o->timeout_s, "Seconds before a silent peer is declared lost");
  cmd->add_option("--mem-mb", o->mem_mb, "Memory each rank allocates and touches")
      ->check(int_in(1, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--bytes", o->msg_bytes, "Size of the message sent to every other rank")
      ->transform(CLI::AsSizeValue(false))
      ->check(int_in(4, int64_t{1} << 34));
  cmd->add_option("--gpus", o->gpu.expected, "GPUs each node should have (default: SLURM_GPUS_ON_NODE where set)")
      ->check(int_in(0, 1024));
  cmd->add_option("--gpu-mem-mb", o->gpu.mem_mb, "Device memory each GPU's check writes and reads back")
      ->check(int_in(1, int64_t{1} << 20))
      ->capture_default_str();
  cmd->footer(
      "Run on every rank: parallm launch -n 4 -- parallm doctor. Where GPUs exist, the first rank of each node\n"
      "reads their health from NVML (ECC errors, retired pages, remapped rows; PARALLM_NVML_LIBRARY) and every\n"
      "rank checks memory and a GEMM on its GPUs.");
  return [o]() { return doctor(*o); };
}

}  // namespace parallm::cli
