// The GPU runtime seen by the rest of parallm: which devices exist, a caching
// device allocator with the same per-category accounting as the host one,
// copies, the compute stream, events and pinned host memory. Nothing here
// exposes CUDA types, so every layer can include it in a CPU-only build; there
// gpu_stub.cpp answers "no devices" and throws CudaError("CUDA was not built")
// for anything that would need one.
//
// Allocator: freed blocks are kept in per-size free lists (sizes rounded up to
// 512 B below 1 MiB and to 2 MiB above) and handed out again, so after the
// first training step no cudaMalloc happens. Blocks are not split; empty_cache()
// gives the cached ones back to the driver (and is tried once before an
// out-of-memory error is raised).
//
// Stream: kernels run on one non-blocking compute stream per device
// (gpu::stream()); copies in this file are ordered on it and synchronous
// towards the host unless named *_async.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "core/allocator.h"

namespace parallm::gpu {

bool built();  // compiled with PARALLM_CUDA
// CPU-only builds: throws CudaError("[<where>] CUDA was not built ...").
[[noreturn]] void throw_not_built(const std::string& where);
int device_count();  // 0 when not built, no driver or no device
inline bool available() {
  return device_count() > 0;
}
std::string describe(int device = 0);  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"
std::string version();                 // "CUDA runtime 13.0, driver 13.0"
void set_device(int device);
int current_device();
int compute_capability(int device = 0);  // 90 for sm_90
int multiprocessor_count(int device = 0);

// Names this process in error messages (the cli sets it to "rank 2/4").
void set_context(const std::string& who);
const std::string& context();

// The compute stream of the current device (a cudaStream_t).
void* stream();
void synchronize();  // waits for the compute stream

void* device_alloc(size_t bytes, MemCategory cat);  // not zeroed
void device_free(void* p, size_t bytes, MemCategory cat);
MemStats device_stats();
void reset_device_peaks();
size_t device_cached_bytes();  // held in free lists, not in use
void empty_cache();

void memcpy_h2d(void* dst, const void* src, size_t bytes);
void memcpy_d2h(void* dst, const void* src, size_t bytes);
void memcpy_d2d(void* dst, const void* src, size_t bytes);
void memcpy_h2d_async(void* dst, const void* src, size_t bytes);  // src should be pinned
void memcpy_d2h_async(void* dst, const void* src, size_t bytes);  // dst should be pinned
void memset_zero(void* p, size_t bytes);                          // async on the compute stream

void* pinned_alloc(size_t bytes);
void pinned_free(void* p);

// An event recorded on the compute stream; elapsed times in milliseconds.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record();
  void wait();  // host waits
  float elapsed_ms_since(const Event& start) const;

 private:
  void* ev_ = nullptr;
};

// A CUDA graph: the compute stream's work that capture() queues (nothing runs
// then), replayed by launch() with the same kernels, arguments and pointers.
// The caching allocator keeps what a replay writes to itself while any graph
// lives: blocks handed out or taken back during a capture, and blocks that
// existed when a capture ended and are freed later, go to the graphs' own
// free lists (reused by later captures, never by other callers) and back to
// the shared ones when the last graph is dropped.
class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Captures what `queue` puts on the compute stream and instantiates it.
  // Returns "" or why not (an unsupported call, an error thrown by `queue`):
  // the stream is then usable again, nothing ran and nothing was kept.
  std::string capture(const std::function<void()>& queue);
  void launch();  // on the compute stream, after the work queued before it
  bool ready() const { return exec_ != nullptr; }

 private:
  void* exec_ = nullptr;    // cudaGraphExec_t
  void* stream_ = nullptr;  // the stream it was captured on (its launches' and its destructor's)
};

bool capturing();  // a Graph's capture is under way: caches keep what it uses for the graph's life

// Copies beside the compute stream, for communicators that carry device
// buffers through host memory: the copies of one Staging run on a stream of
// the device's own, after the compute stream's work queued before
// after_compute(), and done() tells without blocking whether every copy queued
// before mark() has finished. Made on the thread that computes (its device);
// the other calls may come from any thread.
class Staging {
 public:
  Staging();
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  void after_compute();
  void d2h(void* dst, const void* src, size_t bytes);  // dst pinned
  void h2d(void* dst, const void* src, size_t bytes);  // src pinned
  void mark();
  bool done();

 private:
  int device_ = 0;
  void* ready_ = nullptr;   // recorded on the compute stream by after_compute()
  void* marker_ = nullptr;  // recorded on the staging stream by mark()
};

// Device memory owned RAII, accounted under a category (the caching allocator).
struct DevicePool {
  static void* allocate(size_t bytes, MemCategory cat) { return device_alloc(bytes, cat); }
  static void free(void* p, size_t bytes, MemCategory cat) { device_free(p, bytes, cat); }
};
using DeviceBuffer = OwnedBytes<DevicePool>;
// Page-locked host memory (for copies that do not wait for the stream).
struct PinnedPool {
  static void* allocate(size_t bytes, MemCategory) { return pinned_alloc(bytes); }
  static void free(void* p, size_t, MemCategory) { pinned_free(p); }
};
using PinnedBuffer = OwnedBytes<PinnedPool>;

}  // namespace parallm::gpu
