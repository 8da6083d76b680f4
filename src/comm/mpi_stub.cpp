// Built without MPI: the "mpi" backend explains how to get it.
#include "comm/backends.h"
#include "core/error.h"

namespace parallm::comm {

std::unique_ptr<Communicator> make_mpi_world(const CommOptions&) {
  throw CommError("comm.mpi",
                  "parallm was built without MPI; install an MPI (e.g. apt-get install libopenmpi-dev openmpi-bin) "
                  "and rebuild, or use comm.backend=self");
}

std::string mpi_library_version() {
  return "";
}

}  // namespace parallm::comm
