// `parallm doctor`'s GPU checks, so a bad node is named before a job starts:
// the first rank of each node reads every GPU's health from NVML (core/nvml.h:
// ECC errors, retired pages, remapped rows; "gpu N" by NVML's index, with its
// UUID) and checks the GPUs usable here (CUDA's count) are not fewer than
// expected (--gpus, else Slurm's SLURM_GPUS_ON_NODE); every rank then runs a
// device memory check (a pattern written and read back) and a small fp32 GEMM
// against the CPU's on the CUDA devices it covers ("cuda device N", CUDA's
// ordinal; local rank r: devices r, r + ranks on the node, ...). Without GPUs it
// says none was found and why.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/topology.h"

namespace parallm::cli {

struct GpuCheckOptions {
  int expected = -1;      // GPUs each node should have; -1: not said (SLURM_GPUS_ON_NODE where set)
  int64_t mem_mb = 1024;  // device memory each check writes and reads back
};

// Runs this rank's part: returns the lines to print (without the rank's prefix) and adds what is wrong to
// `problems` ("gpu 3: a row remap failed ...").
std::vector<std::string> check_gpus(const comm::RankPlace& place, const GpuCheckOptions& o,
                                    std::vector<std::string>& problems);

}  // namespace parallm::cli
