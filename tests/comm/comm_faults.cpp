// Fault scenarios for ctest, each a separate mpirun job that must end quickly
// with an error naming the culprit instead of hanging:
//   skip    rank 1 calls barrier where the others call all_reduce
//   absent  rank 1 stops issuing collectives (still alive); the others time out
//   kill    rank 2 dies by SIGKILL before a collective
// Like the parallm program, a rank that catches a CommError prints it and
// aborts the job, so no peer is left waiting.
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "comm/communicator.h"

using namespace parallm;
using namespace parallm::comm;

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  CommOptions opt;
  opt.timeout_s = 2;
  auto world = make_world("mpi", opt);
  const int me = world->rank();
  Tensor x = Tensor::empty({1000}, DType::F32);
  try {
    for (int i = 0; i < 2; ++i) world->all_reduce(x);
    if (scenario == "skip") {
      if (me == 1)
        world->barrier();
      else
        world->all_reduce(x);
    } else if (scenario == "absent") {
      if (me == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return 0;
      }
      world->all_reduce(x);
    } else if (scenario == "kill") {
      if (me == 2) std::raise(SIGKILL);
      world->all_reduce(x);
    } else {
      std::fprintf(stderr, "usage: comm_faults skip|absent|kill\n");
      return 2;
    }
    world->barrier();
  } catch (const CommError& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", me, e.what());
    std::fflush(stderr);
    world->abort(3);
  }
  return 0;
}
