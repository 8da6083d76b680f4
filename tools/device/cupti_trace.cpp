// A CUDA injection library that records a program's GPU timeline with CUPTI's
// activity API: every kernel, copy and memset (device start and end), and the
// CUDA runtime calls (host start and end, so synchronizations show). The
// device image has no working Nsight Systems; this takes its place for
// parallm's step analysis. Records are kept in CUPTI's buffers and written at
// exit as tab-separated lines: kind, start_ns, end_ns, stream, bytes, name.
//
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include tools/device/cupti_trace.cpp
//       -L/usr/local/cuda/lib64 -lcupti -o libcupti_trace.so   (one line)
//   CUDA_INJECTION64_PATH=$PWD/libcupti_trace.so PARALLM_TRACE=trace.tsv ./parallm train ...
//   python3 tools/device/trace_summary.py trace.tsv
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace {

FILE* g_out = nullptr;
std::mutex g_mu;
constexpr size_t kBufBytes = 16u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufBytes));
  *size = kBufBytes;
  *max_records = 0;
}

void write_record(const CUpti_Activity* r) {
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
      std::fprintf(g_out, "K\t%llu\t%llu\t%u\t0\t%s\n", static_cast<unsigned long long>(k->start),
                   static_cast<unsigned long long>(k->end), k->streamId, k->name ? k->name : "?");
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
      std::fprintf(g_out, "C\t%llu\t%llu\t%u\t%llu\tmemcpy kind %u\n", static_cast<unsigned long long>(m->start),
                   static_cast<unsigned long long>(m->end), m->streamId, static_cast<unsigned long long>(m->bytes),
                   static_cast<unsigned>(m->copyKind));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
      std::fprintf(g_out, "S\t%llu\t%llu\t%u\t%llu\tmemset\n", static_cast<unsigned long long>(m->start),
                   static_cast<unsigned long long>(m->end), m->streamId, static_cast<unsigned long long>(m->bytes));
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
      const char* name = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS || !name) name = "?";
      std::fprintf(g_out, "R\t%llu\t%llu\t0\t0\t%s\n", static_cast<unsigned long long>(a->start),
                   static_cast<unsigned long long>(a->end), name);
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    CUpti_Activity* r = nullptr;
    while (g_out && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) write_record(r);
  }
  std::free(buffer);
}

void at_exit() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_out) std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("PARALLM_TRACE");
  g_out = std::fopen(path && *path ? path : "cupti_trace.tsv", "w");
  if (!g_out) return 0;
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
  std::atexit(at_exit);
  return 1;
}
