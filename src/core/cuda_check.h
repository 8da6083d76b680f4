// Turning CUDA return codes into typed errors. Only for sources compiled with
// the CUDA toolkit (core/gpu_cuda.cpp, kernels/cuda/*): every runtime call is
// wrapped, and every kernel launch is followed by PARALLM_CUDA_LAUNCHED, so a
// failure names the call, the device and the process:
//   [cuda.malloc] cudaMalloc(1.5 GiB, activations): out of memory (device 0, rank 2/4)
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"
#include "core/gpu.h"

namespace parallm::gpu {

[[noreturn]] void throw_cuda(const char* where, const std::string& call, cudaError_t err);

}  // namespace parallm::gpu

#define PARALLM_CUDA_CHECK(expr, where)                                                      \
  do {                                                                                       \
    cudaError_t parallm_err_ = (expr);                                                       \
    if (parallm_err_ != cudaSuccess) ::parallm::gpu::throw_cuda(where, #expr, parallm_err_); \
  } while (0)

// After a <<<...>>> launch: configuration errors surface here, not later.
#define PARALLM_CUDA_LAUNCHED(where) PARALLM_CUDA_CHECK(cudaGetLastError(), where)
