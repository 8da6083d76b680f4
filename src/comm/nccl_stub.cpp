// Built without NCCL: the "nccl" backend explains how to get it.
#include "comm/backends.h"
#include "core/error.h"

namespace parallm::comm {

bool nccl_built() {
  return false;
}

std::string nccl_library_version() {
  return "";
}

std::unique_ptr<Communicator> make_nccl_world(const CommOptions&) {
  throw CommError("comm.nccl",
                  "parallm was built without NCCL; configure with -DPARALLM_CUDA=ON on a machine with the CUDA "
                  "toolkit and NCCL, or use comm.backend=mpi (host memory)");
}

}  // namespace parallm::comm
