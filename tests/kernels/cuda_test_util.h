// Shared pieces of the CUDA kernel tests: a device copy of a host vector and
// the fixture that skips, saying why, where CUDA is not built or no GPU is present.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "core/allocator.h"
#include "core/gpu.h"

namespace parallm::test {

// A device copy of a host vector; back() returns its current contents.
template <class T>
struct Dev {
  gpu::DeviceBuffer buf;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : buf(h.size() * sizeof(T) + 1, MemCategory::Other), n(h.size()) {
    gpu::memcpy_h2d(buf.data(), h.data(), n * sizeof(T));
  }
  T* p() const { return buf.as<T>(); }
  std::vector<T> back() const {
    std::vector<T> h(n);
    gpu::memcpy_d2h(h.data(), buf.data(), n * sizeof(T));
    return h;
  }
};

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::built()) GTEST_SKIP() << "CUDA not built (configure with -DPARALLM_CUDA=ON)";
    if (!gpu::available()) GTEST_SKIP() << "no GPU on this machine: CUDA kernel tests skipped";
  }
};

}  // namespace parallm::test
