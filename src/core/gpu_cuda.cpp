// The GPU runtime on CUDA: device queries, the caching allocator, the compute
// stream, copies, events and pinned memory (design in gpu.h).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <array>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda_check.h"
#include "core/gpu.h"

namespace parallm::gpu {

namespace {
std::string g_context;

size_t round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
  return bytes < (size_t{1} << 20) ? (bytes + kSmall - 1) / kSmall * kSmall : (bytes + kLarge - 1) / kLarge * kLarge;
}

using FreeLists = std::map<size_t, std::vector<void*>>;

void* take(FreeLists& lists, size_t rounded, size_t& cached) {
  auto it = lists.find(rounded);
  if (it == lists.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  cached -= rounded;
  return p;
}

class CachingAllocator {
 public:
  void* allocate(size_t bytes, MemCategory cat) {
    if (bytes == 0) return nullptr;
    size_t rounded = round_size(bytes);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (capturing_) p = take(graph_free_, rounded, graph_cached_);
      if (!p) p = take(free_, rounded, cached_);
    }
    if (!p) p = fresh(rounded, bytes, cat);
    {
      std::lock_guard<std::mutex> lk(mu_);
      sizes_[p] = {rounded, ++seq_};
    }
    acct_.add(bytes, cat);
    return p;
  }

  void free(void* p, size_t bytes, MemCategory cat) {
    if (!p) return;
    std::lock_guard<std::mutex> lk(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;  // not ours: ignore rather than corrupt the lists
    // A graph may write this block when it is replayed (Graph, gpu.h): it is the graphs' from now on.
    const bool graphs = capturing_ || (graphs_ > 0 && it->second.seq <= sealed_);
    (graphs ? graph_free_ : free_)[it->second.size].push_back(p);
    (graphs ? graph_cached_ : cached_) += it->second.size;
    sizes_.erase(it);
    acct_.sub(bytes, cat);
  }

  // CUDA graphs: a capture starts; it ends, made (a graph lives on) or not; a graph is dropped.
  void capture_begins() {
    std::lock_guard<std::mutex> lk(mu_);
    capturing_ = true;
  }
  void capture_ends(bool made) {
    std::lock_guard<std::mutex> lk(mu_);
    capturing_ = false;
    if (made) ++graphs_;
    sealed_ = seq_;  // also after a failed capture: a block it took from the graphs' lists stays theirs
    if (graphs_ == 0) share_graph_blocks();
  }
  bool capturing() {
    std::lock_guard<std::mutex> lk(mu_);
    return capturing_;
  }
  void graph_dropped() {
    std::lock_guard<std::mutex> lk(mu_);
    if (--graphs_ == 0) share_graph_blocks();
  }

  void empty() {
    std::lock_guard<std::mutex> lk(mu_);
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream()));
    for (auto& [size, list] : free_)
      for (void* p : list) cudaFree(p);
    free_.clear();
    cached_ = 0;
  }

  MemStats stats() const { return acct_.stats(); }
  void reset_peaks() { acct_.reset_peaks(); }
  size_t cached() {
    std::lock_guard<std::mutex> lk(mu_);
    return cached_ + graph_cached_;
  }

 private:
  void* fresh(size_t rounded, size_t bytes, MemCategory cat) {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, rounded);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error state, give the cache back and try once more
      empty();
      err = cudaMalloc(&p, rounded);
    }
    if (err != cudaSuccess) {
      size_t free_b = 0, total_b = 0;
      cudaGetLastError();
      cudaMemGetInfo(&free_b, &total_b);
      throw_cuda("cuda.malloc",
                 fmt::format("cudaMalloc({}, {}) with {} in use by parallm, {} free of {}", format_bytes(bytes),
                             mem_category_name(cat), format_bytes(acct_.total_current()), format_bytes(free_b),
                             format_bytes(total_b)),
                 err);
    }
    return p;
  }
  // No graph lives: its blocks join the shared lists (a later use is ordered after its replays on the stream).
  void share_graph_blocks() {
    for (auto& [size, list] : graph_free_) free_[size].insert(free_[size].end(), list.begin(), list.end());
    graph_free_.clear();
    cached_ += graph_cached_;
    graph_cached_ = 0;
  }
  struct Block {
    size_t size;
    uint64_t seq;  // allocation order
  };
  std::mutex mu_;
  FreeLists free_, graph_free_;  // shared; the graphs' own (Graph)
  std::unordered_map<void*, Block> sizes_;
  size_t cached_ = 0, graph_cached_ = 0;
  uint64_t seq_ = 0;  // allocations so far
  bool capturing_ = false;
  int graphs_ = 0;       // live graphs
  uint64_t sealed_ = 0;  // seq_ when the last capture ended: blocks up to it may be a live graph's
  MemAccounting acct_;
};

CachingAllocator& allocator() {
  static auto* a = new CachingAllocator();  // outlives static destructors that free device buffers
  return *a;
}

// One non-blocking stream per device and kind (0: compute, 1: staging), made on first use, never destroyed.
cudaStream_t device_stream(int dev, int kind) {
  static std::array<std::array<cudaStream_t, 2>, 64> streams{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  cudaStream_t& s = streams.at(dev)[kind];
  if (!s) PARALLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda.stream");
  return s;
}
cudaStream_t compute_stream() {
  return device_stream(current_device(), 0);
}
}  // namespace

void throw_cuda(const char* where, const std::string& call, cudaError_t err) {
  int dev = -1;
  cudaGetDevice(&dev);
  std::string who = g_context.empty() ? "" : ", " + g_context;
  throw CudaError(
      where, fmt::format("{}: {} ({}) (device {}{})", call, cudaGetErrorString(err), cudaGetErrorName(err), dev, who));
}

bool built() {
  return true;
}

int device_count() {
  static const int n = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return c;
  }();
  return n;
}

std::string describe(int device) {
  if (device >= device_count()) return "no GPU";
  cudaDeviceProp p{};
  PARALLM_CUDA_CHECK(cudaGetDeviceProperties(&p, device), "cuda.device");
  return fmt::format("{} (sm_{}{}, {} SMs, {})", p.name, p.major, p.minor, p.multiProcessorCount,
                     format_bytes(p.totalGlobalMem));
}

std::string version() {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  return fmt::format("CUDA runtime {}.{}, driver {}.{}", rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
}

void set_device(int device) {
  PARALLM_CHECK(device >= 0 && device < device_count(), CudaError, "cuda.set_device",
                "device {} does not exist ({} visible{})", device, device_count(),
                g_context.empty() ? "" : ", " + g_context);
  PARALLM_CUDA_CHECK(cudaSetDevice(device), "cuda.set_device");
}

int current_device() {
  int d = 0;
  PARALLM_CUDA_CHECK(cudaGetDevice(&d), "cuda.device");
  return d;
}

int compute_capability(int device) {
  int major = 0, minor = 0;
  PARALLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cuda.device");
  PARALLM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cuda.device");
  return major * 10 + minor;
}

int multiprocessor_count(int device) {
  int n = 0;
  PARALLM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cuda.device");
  return n;
}

void set_context(const std::string& who) {
  g_context = who;
}
const std::string& context() {
  return g_context;
}

void* stream() {
  return compute_stream();
}
void synchronize() {
  PARALLM_CUDA_CHECK(cudaStreamSynchronize(compute_stream()), "cuda.synchronize");
}

void* device_alloc(size_t bytes, MemCategory cat) {
  return allocator().allocate(bytes, cat);
}
void device_free(void* p, size_t bytes, MemCategory cat) {
  allocator().free(p, bytes, cat);
}
MemStats device_stats() {
  return allocator().stats();
}
void reset_device_peaks() {
  allocator().reset_peaks();
}
size_t device_cached_bytes() {
  return allocator().cached();
}
void empty_cache() {
  allocator().empty();
}

void memcpy_h2d(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PARALLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_stream()), "cuda.memcpy");
  synchronize();
}
void memcpy_d2h(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PARALLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_stream()), "cuda.memcpy");
  synchronize();
}
void memcpy_d2d(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PARALLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_stream()), "cuda.memcpy");
}
void memcpy_h2d_async(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PARALLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_stream()), "cuda.memcpy");
}
void memcpy_d2h_async(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PARALLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_stream()), "cuda.memcpy");
}
void memset_zero(void* p, size_t bytes) {
  if (!bytes) return;
  PARALLM_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, compute_stream()), "cuda.memset");
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  PARALLM_CUDA_CHECK(cudaMallocHost(&p, bytes), "cuda.pinned");
  return p;
}
void pinned_free(void* p) {
  if (p) cudaFreeHost(p);
}

Event::Event() {
  cudaEvent_t e;
  PARALLM_CUDA_CHECK(cudaEventCreate(&e), "cuda.event");
  ev_ = e;
}
Event::~Event() {
  if (ev_) cudaEventDestroy(static_cast<cudaEvent_t>(ev_));
}
void Event::record() {
  PARALLM_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ev_), compute_stream()), "cuda.event");
}
void Event::wait() {
  PARALLM_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(ev_)), "cuda.event");
}
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  PARALLM_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.ev_), static_cast<cudaEvent_t>(ev_)),
                     "cuda.event");
  return ms;
}

bool capturing() {
  return allocator().capturing();
}

Graph::Graph() = default;
Graph::~Graph() {
  if (!exec_) return;
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));  // a replay still running keeps its blocks till done
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  allocator().graph_dropped();
}

std::string Graph::capture(const std::function<void()>& queue) {
  PARALLM_CHECK(!exec_, InternalError, "cuda.graph", "this graph was captured already");
  cudaStream_t s = nullptr;
  try {
    s = compute_stream();
  } catch (const std::exception& x) {  // no device
    return x.what();
  }
  cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("cudaStreamBeginCapture: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
  }
  allocator().capture_begins();
  std::string why;
  try {
    queue();
  } catch (const std::exception& x) {
    why = x.what();
  } catch (...) {  // not ours: the capture is ended first, so the stream runs work again, then it goes on up
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    allocator().capture_ends(false);
    throw;
  }
  cudaGraph_t g = nullptr;
  e = cudaStreamEndCapture(s, &g);
  if (why.empty() && e != cudaSuccess)
    why = fmt::format("cudaStreamEndCapture: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
  cudaGraphExec_t x = nullptr;
  if (why.empty()) {
    e = cudaGraphInstantiate(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (e != cudaSuccess) {
      why = fmt::format("cudaGraphInstantiate: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
      x = nullptr;
    }
  }
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();  // a failed capture's errors are not sticky: the stream runs on
  allocator().capture_ends(x != nullptr);
  exec_ = x;
  stream_ = s;
  return why;
}

void Graph::launch() {
  PARALLM_CHECK(exec_, InternalError, "cuda.graph", "launch before a successful capture");
  PARALLM_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_)),
                     "cuda.graph");
}

Staging::Staging() : device_(current_device()) {
  cudaEvent_t a, b;
  PARALLM_CUDA_CHECK(cudaEventCreateWithFlags(&a, cudaEventDisableTiming), "cuda.staging");
  PARALLM_CUDA_CHECK(cudaEventCreateWithFlags(&b, cudaEventDisableTiming), "cuda.staging");
  ready_ = a;
  marker_ = b;
}
Staging::~Staging() {
  cudaEventDestroy(static_cast<cudaEvent_t>(ready_));
  cudaEventDestroy(static_cast<cudaEvent_t>(marker_));
}
void Staging::after_compute() {
  PARALLM_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ready_), device_stream(device_, 0)), "cuda.staging");
  PARALLM_CUDA_CHECK(cudaStreamWaitEvent(device_stream(device_, 1), static_cast<cudaEvent_t>(ready_), 0),
                     "cuda.staging");
}
void Staging::d2h(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PARALLM_CUDA_CHECK(cudaSetDevice(device_), "cuda.staging");  // the calling thread may not have chosen it
  PARALLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, device_stream(device_, 1)),
                     "cuda.staging");
}
void Staging::h2d(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PARALLM_CUDA_CHECK(cudaSetDevice(device_), "cuda.staging");
  PARALLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, device_stream(device_, 1)),
                     "cuda.staging");
}
void Staging::mark() {
  PARALLM_CUDA_CHECK(cudaSetDevice(device_), "cuda.staging");
  PARALLM_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(marker_), device_stream(device_, 1)), "cuda.staging");
}
bool Staging::done() {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(marker_));
  if (e == cudaErrorNotReady) return false;
  PARALLM_CUDA_CHECK(e, "cuda.staging");
  return true;
}

}  // namespace parallm::gpu
