// Tensor: a typed, shaped view of bytes on a device. A tensor either owns its
// storage (shared, so views keep it alive) or views memory owned elsewhere,
// which is how parameters and gradients live: one flat buffer per kind, with a
// named tensor view per parameter. Row-major (C) layout, contiguous views only:
// kernels take raw pointers and sizes, the tensor is the bookkeeping around them.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace parallm {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  // Owning tensor, zero-filled, accounted under `cat`.
  static Tensor empty(const Shape& shape, DType dtype, MemCategory cat = MemCategory::Other,
                      Device dev = Device::cpu());
  // Non-owning view of existing memory.
  static Tensor view_of(void* data, const Shape& shape, DType dtype, Device dev = Device::cpu());

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  void* raw() const { return data_; }
  template <class T>
  T* data() const {
    check_type<T>();
    return static_cast<T*>(data_);
  }

  // A view of `count` elements starting at element `offset`, reshaped to `shape`.
  Tensor slice_view(int64_t offset, const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  void zero();

 private:
  template <class T>
  void check_type() const;

  std::shared_ptr<Buffer> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_;
};

template <class T>
void Tensor::check_type() const {
  DType want;
  if constexpr (std::is_same_v<T, float>)
    want = DType::F32;
  else if constexpr (std::is_same_v<T, int32_t>)
    want = DType::I32;
  else if constexpr (std::is_same_v<T, uint16_t>)
    want = (dtype_ == DType::BF16 ? DType::BF16 : DType::U16);
  else
    static_assert(sizeof(T) == 0, "unsupported element type");
  PARALLM_CHECK(dtype_ == want, ShapeError, "tensor.data", "tensor is {}, accessed as {}", dtype_name(dtype_),
                dtype_name(want));
}

}  // namespace parallm
