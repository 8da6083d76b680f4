// The one main() of the multi-rank test programs (comm, parallel, train):
// GoogleTest over a world communicator made for the backend named by argv[1]
// (or the program's default), with an NCCL world skipped visibly (ctest's
// SKIP_RETURN_CODE 77) where it cannot run, a timeout on every operation so a
// broken test fails instead of hanging ctest, and one report (rank 0's;
// failures still set every rank's exit code).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "comm/communicator.h"
#include "nccl_skip.h"

namespace parallm::test_util {

struct WorldMain {
  std::string backend;  // fixed; empty: argv[1], else `default_backend`
  std::string default_backend = "auto";
  double timeout_s = 60;
  bool one_report = true;                             // silence the other ranks' printers
  bool barrier_at_end = true;                         // every rank done before any tears its world down
  std::function<void(comm::Communicator&)> on_world;  // after the world exists, before the tests
};

inline int world_test_main(int argc, char** argv, comm::Communicator*& world, const WorldMain& o) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string backend = !o.backend.empty() ? o.backend : argc > 1 ? argv[1] : o.default_backend;
  if (backend == "nccl")
    if (const int skip = nccl_skip()) return skip;
  comm::CommOptions opt;
  opt.timeout_s = o.timeout_s;
  auto w = comm::make_world(backend, opt);
  world = w.get();
  if (o.on_world) o.on_world(*world);
  if (o.one_report && world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  if (o.barrier_at_end) world->barrier();
  world = nullptr;
  w.reset();
  return rc;
}

}  // namespace parallm::test_util
