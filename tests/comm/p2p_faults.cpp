// Point-to-point faults for ctest, each a separate two-rank mpirun job that
// must end quickly with an error naming the peer instead of hanging:
//   timeout   rank 0 sends 8 MB to rank 1, which never receives: the send
//             fails after comm.timeout_s (2 s), naming rank 1
//   mismatch  rank 1 receives 1000 elements where rank 0 sent 999: rank 1's
//             receive fails, naming rank 0 and both counts
// Usage: p2p_faults mpi|nccl timeout|mismatch. As in the parallm program, a
// rank that catches a CommError prints it and aborts the job, so no peer is
// left waiting. nccl exits 77 (a ctest skip) without a GPU per rank.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology.h"
#include "core/gpu.h"
#include "nccl_skip.h"

using namespace parallm;
using namespace parallm::comm;

namespace {

// `n` floats of value 1, in device memory for nccl.
struct Floats {
  gpu::DeviceBuffer dev;
  std::vector<float> host;
  Tensor t;
  Floats(int64_t n, bool device) : host(static_cast<size_t>(n), 1.0f) {
    if (device) {
      dev = gpu::DeviceBuffer(static_cast<size_t>(n) * 4, MemCategory::Other);
      gpu::memcpy_h2d(dev.data(), host.data(), host.size() * 4);
      t = Tensor::view_of(dev.data(), {n}, DType::F32, Device::cuda(gpu::current_device()));
    } else {
      t = Tensor::view_of(host.data(), {n}, DType::F32);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string backend = argc > 1 ? argv[1] : "";
  const std::string scenario = argc > 2 ? argv[2] : "";
  if ((backend != "mpi" && backend != "nccl") || (scenario != "timeout" && scenario != "mismatch")) {
    std::fprintf(stderr, "usage: p2p_faults mpi|nccl timeout|mismatch\n");
    return 2;
  }
  if (backend == "nccl")
    if (const int skip = test_util::nccl_skip()) return skip;
  CommOptions opt;
  opt.timeout_s = 2;
  auto world = make_world(backend, opt);
  const int me = world->rank();
  const bool device = world->backend() == "nccl";
  if (world->size() < 2) {
    std::fprintf(stderr, "p2p_faults needs two ranks\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (scenario == "timeout") {
      if (me == 0) {
        Floats big((int64_t{8} << 20) / 4 + 1, device);
        world->send(big.t, 1, 5);
        std::printf("p2p_faults: FAIL: the send to a rank that never receives completed\n");
      } else {
        std::this_thread::sleep_for(std::chrono::seconds(30));  // never receives; the job's abort ends it
      }
    } else {
      if (me == 0) {
        Floats out(999, device);
        world->send(out.t, 1, 4);
      } else if (me == 1) {
        Floats in(1000, device);
        world->recv(in.t, 0, 4);
        std::printf("p2p_faults: FAIL: a receive of 1000 elements took a message of 999\n");
      }
      std::this_thread::sleep_for(std::chrono::seconds(30));  // rank 1's abort ends the job
    }
  } catch (const CommError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "rank %d: error: %s\n", me, e.what());
    // The send must fail by comm.timeout_s (and the peers' diagnosis), not hang.
    const bool in_time = scenario != "timeout" || (s >= opt.timeout_s && s < opt.timeout_s + 4.0);
    std::fprintf(stderr, "p2p_faults: rank %d failed after %.1f s: %s\n", me, s, in_time ? "PASS" : "FAIL (late)");
    std::fflush(stdout);
    std::fflush(stderr);
    world->abort(3);
  }
  return 0;
}
