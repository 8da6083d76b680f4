#include "core/tensor.h"

#include <cstring>

namespace parallm {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemCategory cat, Device dev) {
  for (auto d : shape) PARALLM_CHECK(d >= 0, ShapeError, "tensor.empty", "negative dimension in {}", shape_str(shape));
  PARALLM_CHECK(dev.is_cpu(), ShapeError, "tensor.empty", "device {} is not available in this build", dev.str());
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = dev;
  t.storage_ = std::make_shared<Buffer>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), cat);
  t.data_ = t.storage_->data();
  return t;
}

Tensor Tensor::view_of(void* data, const Shape& shape, DType dtype, Device dev) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = dev;
  t.data_ = data;
  return t;
}

Tensor Tensor::slice_view(int64_t offset, const Shape& shape) const {
  int64_t n = shape_numel(shape);
  PARALLM_CHECK(offset >= 0 && offset + n <= numel(), ShapeError, "tensor.slice_view",
                "slice [{}, {}) out of range for tensor of {} elements", offset, offset + n, numel());
  Tensor t = *this;
  t.shape_ = shape;
  t.data_ = static_cast<char*>(data_) + offset * static_cast<int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  PARALLM_CHECK(shape_numel(shape) == numel(), ShapeError, "tensor.reshape", "cannot reshape {} to {}",
                shape_str(shape_), shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

void Tensor::zero() {
  if (data_) std::memset(data_, 0, nbytes());
}

}  // namespace parallm
