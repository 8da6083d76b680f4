// Host allocator with per-category accounting. Every long-lived buffer of a
// training run (parameters, gradients, optimizer state, activations, comm
// buffers, scratch) is allocated here with its category, so a run can report
// current and peak bytes of each, and the memory planner can be checked
// against what was really used. Allocations are 64-byte aligned (a cache line,
// one AVX-512 vector) and happen at setup, never on the training hot path.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

namespace parallm {

// Offloaded: training state kept in the host pool instead of the device
// (ZeRO offload); on a CPU-only machine the same memory, accounted apart.
enum class MemCategory : int { Params = 0, Grads, OptState, Activations, Comm, Scratch, Offloaded, Other, kCount };
const char* mem_category_name(MemCategory c);

struct MemStats {
  std::array<size_t, static_cast<int>(MemCategory::kCount)> current{};
  std::array<size_t, static_cast<int>(MemCategory::kCount)> peak{};
  size_t total_current = 0;
  size_t total_peak = 0;
};

// Current and peak bytes per category and in total, thread-safe. The host
// allocator and the GPU's caching allocator (core/gpu.h) both keep one.
class MemAccounting {
 public:
  void add(size_t bytes, MemCategory cat);
  void sub(size_t bytes, MemCategory cat);
  size_t total_current() const { return total_cur_.load(); }
  MemStats stats() const;
  void reset_peaks();

 private:
  std::array<std::atomic<size_t>, static_cast<int>(MemCategory::kCount)> cur_{};
  std::array<std::atomic<size_t>, static_cast<int>(MemCategory::kCount)> peak_{};
  std::atomic<size_t> total_cur_{0}, total_peak_{0};
};

class HostAllocator {
 public:
  static HostAllocator& instance();
  void* allocate(size_t bytes, MemCategory cat);  // zero-filled
  void deallocate(void* p, size_t bytes, MemCategory cat);
  MemStats stats() const { return acct_.stats(); }
  void reset_peaks() { acct_.reset_peaks(); }

 private:
  MemAccounting acct_;
};

// Owning RAII block of raw bytes from a pool: Pool::allocate(bytes, cat) and
// Pool::free(ptr, bytes, cat). Host memory (Buffer) and GPU memory
// (gpu::DeviceBuffer) are the same handle over different pools.
template <class Pool>
class OwnedBytes {
 public:
  OwnedBytes() = default;
  OwnedBytes(size_t bytes, MemCategory cat) : ptr_(Pool::allocate(bytes, cat)), bytes_(bytes), cat_(cat) {}
  ~OwnedBytes() { release(); }
  OwnedBytes(const OwnedBytes&) = delete;
  OwnedBytes& operator=(const OwnedBytes&) = delete;
  OwnedBytes(OwnedBytes&& o) noexcept { *this = std::move(o); }
  OwnedBytes& operator=(OwnedBytes&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      cat_ = o.cat_;
    }
    return *this;
  }
  void* data() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return cat_; }
  void release() {
    if (ptr_) Pool::free(ptr_, bytes_, cat_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::Other;
};

struct HostPool {
  static void* allocate(size_t bytes, MemCategory cat) { return HostAllocator::instance().allocate(bytes, cat); }
  static void free(void* p, size_t bytes, MemCategory cat) { HostAllocator::instance().deallocate(p, bytes, cat); }
};
using Buffer = OwnedBytes<HostPool>;

// Typed convenience wrapper: a fixed-size array of T.
template <class T>
class Array {
 public:
  Array() = default;
  Array(size_t n, MemCategory cat) : buf_(n * sizeof(T), cat), n_(n) {}
  T* data() const { return static_cast<T*>(buf_.data()); }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() const { return data(); }
  T* end() const { return data() + n_; }

 private:
  Buffer buf_;
  size_t n_ = 0;
};

std::string format_bytes(size_t b);

}  // namespace parallm
