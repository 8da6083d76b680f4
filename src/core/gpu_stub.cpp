// CPU-only build of the GPU runtime: no devices, and a clear error for any
// call that needs one.
#include "core/error.h"
#include "core/gpu.h"

namespace parallm::gpu {

namespace {
std::string g_context;
[[noreturn]] void not_built(const char* where) {
  throw_not_built(where);
}
}  // namespace

void throw_not_built(const std::string& where) {
  throw CudaError(where, "CUDA was not built: this parallm is CPU-only (configure with -DPARALLM_CUDA=ON)");
}

bool built() {
  return false;
}
int device_count() {
  return 0;
}
std::string describe(int) {
  return "no GPU (CUDA not built)";
}
std::string version() {
  return "CUDA not built";
}
void set_device(int) {
  not_built("cuda.set_device");
}
int current_device() {
  return 0;
}
int compute_capability(int) {
  not_built("cuda.device");
}
int multiprocessor_count(int) {
  not_built("cuda.device");
}
void set_context(const std::string& who) {
  g_context = who;
}
const std::string& context() {
  return g_context;
}
void* stream() {
  not_built("cuda.stream");
}
void synchronize() {}
void* device_alloc(size_t, MemCategory) {
  not_built("cuda.malloc");
}
void device_free(void*, size_t, MemCategory) {}
MemStats device_stats() {
  return {};
}
void reset_device_peaks() {}
size_t device_cached_bytes() {
  return 0;
}
void empty_cache() {}
void memcpy_h2d(void*, const void*, size_t) {
  not_built("cuda.memcpy");
}
void memcpy_d2h(void*, const void*, size_t) {
  not_built("cuda.memcpy");
}
void memcpy_d2d(void*, const void*, size_t) {
  not_built("cuda.memcpy");
}
void memcpy_h2d_async(void*, const void*, size_t) {
  not_built("cuda.memcpy");
}
void memcpy_d2h_async(void*, const void*, size_t) {
  not_built("cuda.memcpy");
}
void memset_zero(void*, size_t) {
  not_built("cuda.memset");
}
void* pinned_alloc(size_t) {
  not_built("cuda.pinned");
}
void pinned_free(void*) {}
Event::Event() {
  not_built("cuda.event");
}
Event::~Event() = default;
void Event::record() {}
void Event::wait() {}
float Event::elapsed_ms_since(const Event&) const {
  return 0.0f;
}

Staging::Staging() {
  not_built("cuda.staging");
}
Staging::~Staging() = default;
void Staging::after_compute() {}
void Staging::d2h(void*, const void*, size_t) {}
void Staging::h2d(void*, const void*, size_t) {}
void Staging::mark() {}
bool Staging::done() {
  return true;
}

bool capturing() {
  return false;
}
Graph::Graph() = default;
Graph::~Graph() = default;
std::string Graph::capture(const std::function<void()>&) {
  return "CUDA was not built";
}
void Graph::launch() {
  not_built("cuda.graph");
}

}  // namespace parallm::gpu
