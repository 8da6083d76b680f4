// The generated headers' values as one struct (build_info.h).
#include "core/build_info.h"

#include "build_info_config.h"
#include "build_info_git.h"

namespace parallm {

const BuildInfo& build_info() {
  static const BuildInfo info{PARALLM_GIT_REVISION,
                              PARALLM_GIT_DESCRIBE,
                              PARALLM_GIT_DIRTY,
                              PARALLM_BUILD_TYPE,
                              PARALLM_COMPILER,
                              PARALLM_CXX_FLAGS,
                              PARALLM_SANITIZERS,
                              PARALLM_BI_CUDA != 0,
                              PARALLM_BI_CUDA ? PARALLM_CUDA_ARCHITECTURES : "",
                              PARALLM_BI_CUDA ? PARALLM_CUDA_TOOLKIT : "",
                              PARALLM_BI_NCCL != 0,
                              PARALLM_BI_CUDNN != 0};
  return info;
}

}  // namespace parallm
