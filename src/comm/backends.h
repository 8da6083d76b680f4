// Backend factories (internal to comm/): make_world picks one.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace parallm::comm {

std::unique_ptr<Communicator> make_self_world(const CommOptions& options);
// Initializes MPI (thread level MULTIPLE) on first use; throws CommError when
// parallm was built without MPI or MPI cannot start.
std::unique_ptr<Communicator> make_mpi_world(const CommOptions& options);
// NCCL between GPUs: bootstrapped through MPI under an MPI launcher, through
// a FileStore (PARALLM_STORE_DIR) otherwise, or alone for one rank. Picks the
// GPU by local rank. CommError when built without NCCL or no GPU is visible.
std::unique_ptr<Communicator> make_nccl_world(const CommOptions& options);
// True when a launcher (mpirun, mpiexec, srun, PALS, PMI) started more than one rank.
bool launched_multi_rank();

}  // namespace parallm::comm
