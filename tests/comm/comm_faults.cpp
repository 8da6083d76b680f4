// Fault scenarios for ctest, each a separate mpirun job that must end quickly
// with an error naming the culprit instead of hanging:
//   skip    rank 1 calls barrier where the others call all_reduce
//   absent  rank 1 stops issuing collectives (still alive); the others time out
//   kill    rank 2 dies by SIGKILL before a collective
//   stop    rank 1 stops itself (SIGSTOP) before collective #3, which the
//           others issue asynchronously, as DDP does: it can answer nothing,
//           and the error must still name it (not the waiter's watchdog)
//   stop_mid rank 1 is stopped by a thread of its own while the ranks run
//           large all-reduces, so mostly inside the library's data phase: the
//           waiters' watchdog asks the peers and names it
//   elsewhere rank 3 stops; rank 0 waits in group {0,1} for rank 1, which
//           is late into group {1,3} (with rank 3): rank 1 answers rank 0
//           (idle), so rank 0's diagnosis asks the whole world and names
//           rank 3, whom no one of its own group waits for
// Like the parallm program, a rank that catches a CommError prints it and
// aborts the job, so no peer is left waiting. As in the program, a timeout
// writes every thread's stack to a trace file; the rank checks it names the
// communication thread, says so, and removes it.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "comm/communicator.h"
#include "core/trace.h"

using namespace parallm;
using namespace parallm::comm;

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  CommOptions opt;
  opt.timeout_s = 2;
  auto world = make_world("mpi", opt);
  const int me = world->rank();
  const std::string trace_path =
      (std::filesystem::temp_directory_path() / ("parallm_faults_trace_" + std::to_string(::getpid()) + ".txt"))
          .string();
  trace::install(trace_path);
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
    } else if (scenario == "stop") {
      if (me == 1) std::raise(SIGSTOP);  // the job's abort kills it
      world->all_reduce_async(x, ReduceOp::Sum)->wait();
    } else if (scenario == "stop_mid") {
      Tensor big = Tensor::empty({int64_t{16} << 20}, DType::F32);
      std::thread stopper;
      if (me == 1)
        stopper = std::thread([] {
          std::this_thread::sleep_for(std::chrono::seconds(1));
          std::raise(SIGSTOP);
        });
      for (int i = 0; i < 10000; ++i) world->all_reduce_async(big, ReduceOp::Sum)->wait();
      if (stopper.joinable()) stopper.join();
    } else if (scenario == "elsewhere") {
      auto pairs = world->split(me < 2 ? 0 : 1, me, "pairs");  // {0,1} {2,3}
      auto odd = world->split(me % 2, me, "parity");           // {0,2} {1,3}
      if (me == 3) std::raise(SIGSTOP);
      // Rank 0's report (2 s, then 1 s asking the world) comes first, seconds ahead of the others' (under load too).
      if (me == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(3));
        odd->all_reduce(x);
      }
      if (me == 0) pairs->all_reduce(x);
      if (me == 2) {
        std::this_thread::sleep_for(std::chrono::seconds(4));
        pairs->barrier();
      }
    } else {
      std::fprintf(stderr, "usage: comm_faults skip|absent|kill|stop|stop_mid|elsewhere\n");
      return 2;
    }
    world->barrier();
  } catch (const CommError& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", me, e.what());
    if (std::filesystem::exists(trace_path)) {
      std::stringstream text;
      text << std::ifstream(trace_path).rdbuf();
      const bool comm_thread = text.str().find("\"parallm-comm\"") != std::string::npos;
      std::fprintf(stderr, "rank %d: trace file %s the communication thread\n", me,
                   comm_thread ? "shows" : "does not show");
      std::filesystem::remove(trace_path);
    }
    std::fflush(stderr);
    world->abort(3);
  }
  return 0;
}
