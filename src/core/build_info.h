// Where this binary came from, for a run's repro.json: the source tree's git
// revision (read at every build by src/core/build_info.cmake, with whether
// tracked files had uncommitted changes) and the configuration CMake chose
// (build type, compiler, the C++ flags every source gets, sanitizers, the
// CUDA backend with its architectures, NCCL and cuDNN).
#pragma once
#include <string>

namespace parallm {

struct BuildInfo {
  std::string git_revision;  // the commit's hash, or "unknown" (not built from a git checkout)
  std::string git_describe;  // `git describe --always --tags --dirty`
  bool git_dirty = false;    // tracked files differed from the commit when it was built
  std::string build_type;    // CMAKE_BUILD_TYPE
  std::string compiler;      // "GNU 12.2.0"
  std::string cxx_flags;     // CMAKE_CXX_FLAGS, its build type's flags and the project's compile options
  std::string sanitizers;    // "address,undefined", or "" (PARALLM_SANITIZE)
  bool cuda = false;         // the CUDA backend (PARALLM_CUDA)
  std::string cuda_architectures, cuda_toolkit;  // "" without CUDA
  bool nccl = false, cudnn = false;
};

const BuildInfo& build_info();

}  // namespace parallm
