// A fixed-size array of T on the CPU or on a GPU: host memory from the
// HostAllocator (zero-filled) or device memory from the caching device
// allocator (zeroed on the compute stream), accounted under one category.
// Models and optimizers keep their flat buffers in these, so one code path
// serves both devices and only the kernels differ.
#pragma once
#include <algorithm>
#include <cstddef>

#include "core/allocator.h"
#include "core/device.h"
#include "core/gpu.h"

namespace parallm {

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(size_t n, MemCategory cat, Device dev) : dev_(dev), n_(n) {
    if (dev.is_cpu()) {
      host_ = Array<T>(n, cat);
      p_ = host_.data();
    } else {
      device_ = gpu::DeviceBuffer(n * sizeof(T), cat);
      p_ = device_.as<T>();
      gpu::memset_zero(p_, n * sizeof(T));
    }
  }
  T* data() const { return p_; }
  size_t size() const { return n_; }
  Device device() const { return dev_; }
  // Copies between this array (from element `offset`) and host memory.
  void copy_from_host(const T* src, size_t count, size_t offset = 0) {
    if (dev_.is_cpu())
      std::copy(src, src + count, p_ + offset);
    else
      gpu::memcpy_h2d(p_ + offset, src, count * sizeof(T));
  }
  void copy_to_host(T* dst, size_t count, size_t offset = 0) const {
    if (dev_.is_cpu())
      std::copy(p_ + offset, p_ + offset + count, dst);
    else
      gpu::memcpy_d2h(dst, p_ + offset, count * sizeof(T));
  }
  void zero() {
    if (dev_.is_cpu())
      std::fill(p_, p_ + n_, T{});
    else
      gpu::memset_zero(p_, n_ * sizeof(T));
  }

 private:
  Device dev_;
  Array<T> host_;
  gpu::DeviceBuffer device_;
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace parallm
