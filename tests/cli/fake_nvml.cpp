/* A stand-in for libnvidia-ml.so.1 with NVML's C interface (C linkage), for `parallm doctor`'s
 * GPU health checks on machines without the driver (PARALLM_NVML_LIBRARY points at
 * it). Scripted by the environment:
 *   FAKE_NVML_GPUS  how many GPUs (default 2)
 *   FAKE_NVML_BAD   the index of a sick GPU: 3 uncorrected volatile ECC errors, a row
 *                   remap pending, 1 correctable row remapped
 *   FAKE_NVML_OLD   the index of a pre-A100 GPU: no remapped rows (not supported), 2
 *                   pages retired for single-bit errors
 *   FAKE_NVML_NOECC the index of a GPU without ECC (not supported)
 *   FAKE_NVML_LOST  the index of a GPU NVML cannot reach (its handle: 15, GPU is lost)
 *   FAKE_NVML_INIT  nvmlInit_v2's return code (default 0; 9: the driver is not loaded) */
#include <cstdio>
#include <cstdlib>

extern "C" {

typedef int nvmlReturn_t;
typedef void* nvmlDevice_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;

enum { kSuccess = 0, kInvalid = 2, kNotSupported = 3, kInsufficientSize = 7 };

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}
static int index_of(nvmlDevice_t d) {
  return static_cast<int>(reinterpret_cast<long>(d)) - 1;
}
static int is(const char* name, nvmlDevice_t d) {
  return env_int(name, -1) == index_of(d);
}

nvmlReturn_t nvmlInit_v2(void) {
  return env_int("FAKE_NVML_INIT", 0);
}
nvmlReturn_t nvmlShutdown(void) {
  return kSuccess;
}
const char* nvmlErrorString(nvmlReturn_t r) {
  return r == 9 ? "Driver Not Loaded" : r == 15 ? "GPU is lost" : "Unknown Error";
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* buf, unsigned n) {
  snprintf(buf, n, "999.1");
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n) {
  *n = static_cast<unsigned>(env_int("FAKE_NVML_GPUS", 2));
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t* d) {
  if (i >= static_cast<unsigned>(env_int("FAKE_NVML_GPUS", 2))) return kInvalid;
  if (static_cast<int>(i) == env_int("FAKE_NVML_LOST", -1)) return 15;
  *d = reinterpret_cast<nvmlDevice_t>(static_cast<long>(i + 1));
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* buf, unsigned n) {
  snprintf(buf, n, "Fake GPU %d", index_of(d));
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* buf, unsigned n) {
  snprintf(buf, n, "GPU-fake-%d", index_of(d));
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  m->total = 80ull << 30;
  m->used = 1ull << 29;
  m->free = m->total - m->used;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, int* current, int* pending) {
  if (is("FAKE_NVML_NOECC", d)) return kNotSupported;
  *current = *pending = 1;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long* n) {
  *n = is("FAKE_NVML_BAD", d) && type == 1 ? 3 : 0; /* uncorrected, volatile and aggregate */
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned* count, unsigned long long* addresses) {
  if (!is("FAKE_NVML_OLD", d)) return kNotSupported;
  const unsigned have = cause == 0 ? 2 : 0;
  const bool fits = *count >= have;
  *count = have;
  return fits ? kSuccess : kInsufficientSize;
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int* pending) {
  if (!is("FAKE_NVML_OLD", d)) return kNotSupported;
  *pending = 0;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned* corr, unsigned* unc, unsigned* pending,
                                       unsigned* failed) {
  if (is("FAKE_NVML_OLD", d)) return kNotSupported;
  const int bad = is("FAKE_NVML_BAD", d);
  *corr = bad ? 1 : 0;
  *unc = 0;
  *pending = bad ? 1 : 0;
  *failed = 0;
  return kSuccess;
}
}  // extern "C"
