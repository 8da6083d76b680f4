// The visible skip of an NCCL test program (ctest's SKIP_RETURN_CODE 77):
// without NCCL, without a GPU, or with more ranks on this node than GPUs
// (NCCL needs one GPU per rank). Prints why and returns 77; 0 when it can run.
#pragma once
#include <cstdio>

#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "core/gpu.h"

namespace parallm::test_util {

inline int nccl_skip() {
  if (!comm::nccl_built() || !gpu::available()) {
    std::printf("skipped: %s\n", comm::nccl_built() ? "no GPU visible" : "built without NCCL");
    return 77;
  }
  const comm::EnvRank er = comm::env_rank();
  if (er.size > 1 && er.local_size > gpu::device_count()) {
    std::printf("skipped: %d ranks on this node, %d GPU(s): NCCL needs one GPU per rank\n", er.local_size,
                gpu::device_count());
    return 77;
  }
  return 0;
}

}  // namespace parallm::test_util
