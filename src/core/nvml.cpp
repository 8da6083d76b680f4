// NVML at run time (nvml.h). The few entry points used, with the types and
// constants of NVML's documented C interface.
#include "core/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include "core/env.h"

namespace parallm::nvml {

namespace {
using Ret = int;  // nvmlReturn_t
using Device = void*;
constexpr Ret kSuccess = 0, kInsufficientSize = 7;
constexpr int kCorrected = 0, kUncorrected = 1;          // nvmlMemoryErrorType_t
constexpr int kVolatile = 0, kAggregate = 1;             // nvmlEccCounterType_t
constexpr int kSingleBitPages = 0, kDoubleBitPages = 1;  // nvmlPageRetirementCause_t
struct Memory {
  unsigned long long total, free, used;
};

struct Api {
  void* lib = nullptr;
  Ret (*init)() = nullptr;
  Ret (*shutdown)() = nullptr;
  const char* (*error_string)(Ret) = nullptr;
  Ret (*driver_version)(char*, unsigned) = nullptr;
  Ret (*count)(unsigned*) = nullptr;
  Ret (*handle)(unsigned, Device*) = nullptr;
  Ret (*name)(Device, char*, unsigned) = nullptr;
  Ret (*uuid)(Device, char*, unsigned) = nullptr;
  Ret (*memory)(Device, Memory*) = nullptr;
  Ret (*ecc_mode)(Device, int*, int*) = nullptr;
  Ret (*ecc_errors)(Device, int, int, unsigned long long*) = nullptr;
  Ret (*retired_pages)(Device, int, unsigned*, unsigned long long*) = nullptr;
  Ret (*retired_pending)(Device, int*) = nullptr;
  Ret (*remapped_rows)(Device, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;

  // The function `sym` into `f`; false if the library lacks it (then `why` names it).
  template <class F>
  bool bind(F& f, const char* sym, std::string& why) {
    f = reinterpret_cast<F>(dlsym(lib, sym));
    if (!f) why = fmt::format("{} has no {}", env::value(env::Var::NvmlLibrary), sym);
    return f != nullptr;
  }
  std::string error(Ret r) const { return error_string ? error_string(r) : fmt::format("NVML error {}", r); }
};

// The entry points every NVML has; the others are optional (an older driver lacks remapped rows, say): left null,
// their items unknown.
bool bind_all(Api& a, std::string& why) {
  const bool ok = a.bind(a.init, "nvmlInit_v2", why) && a.bind(a.shutdown, "nvmlShutdown", why) &&
                  a.bind(a.count, "nvmlDeviceGetCount_v2", why) &&
                  a.bind(a.handle, "nvmlDeviceGetHandleByIndex_v2", why);
  if (!ok) return false;
  std::string ignored;
  a.bind(a.error_string, "nvmlErrorString", ignored);
  a.bind(a.driver_version, "nvmlSystemGetDriverVersion", ignored);
  a.bind(a.name, "nvmlDeviceGetName", ignored);
  a.bind(a.uuid, "nvmlDeviceGetUUID", ignored);
  a.bind(a.memory, "nvmlDeviceGetMemoryInfo", ignored);
  a.bind(a.ecc_mode, "nvmlDeviceGetEccMode", ignored);
  a.bind(a.ecc_errors, "nvmlDeviceGetTotalEccErrors", ignored);
  a.bind(a.retired_pages, "nvmlDeviceGetRetiredPages", ignored);
  a.bind(a.retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus", ignored);
  a.bind(a.remapped_rows, "nvmlDeviceGetRemappedRows", ignored);
  return true;
}

std::optional<uint64_t> ecc_count(const Api& a, Device d, int type, int counter) {
  unsigned long long n = 0;
  if (!a.ecc_errors || a.ecc_errors(d, type, counter, &n) != kSuccess) return std::nullopt;
  return n;
}

std::optional<unsigned> retired(const Api& a, Device d, int cause) {
  unsigned n = 0;  // 0: ask for the count only
  if (!a.retired_pages) return std::nullopt;
  const Ret r = a.retired_pages(d, cause, &n, nullptr);
  if (r != kSuccess && r != kInsufficientSize) return std::nullopt;
  return n;
}

Gpu read_gpu(const Api& a, unsigned i, Device d) {
  Gpu g;
  g.index = static_cast<int>(i);
  char buf[96] = {};
  if (a.name && a.name(d, buf, sizeof buf) == kSuccess) g.name = buf;
  buf[0] = 0;
  if (a.uuid && a.uuid(d, buf, sizeof buf) == kSuccess) g.uuid = buf;
  Memory m{};
  if (a.memory && a.memory(d, &m) == kSuccess) {
    g.mem_total = m.total;
    g.mem_used = m.used;
  }
  int cur = 0, pending = 0;
  if (a.ecc_mode && a.ecc_mode(d, &cur, &pending) == kSuccess) g.ecc_on = cur != 0;
  if (g.ecc_on.value_or(false)) {
    g.ecc_uncorrected_volatile = ecc_count(a, d, kUncorrected, kVolatile);
    g.ecc_corrected_volatile = ecc_count(a, d, kCorrected, kVolatile);
    g.ecc_uncorrected_aggregate = ecc_count(a, d, kUncorrected, kAggregate);
  }
  g.retired_single_bit = retired(a, d, kSingleBitPages);
  g.retired_double_bit = retired(a, d, kDoubleBitPages);
  int rp = 0;
  if (a.retired_pending && a.retired_pending(d, &rp) == kSuccess) g.retired_pending = rp != 0;
  unsigned corr = 0, unc = 0, rpend = 0, fail = 0;
  if (a.remapped_rows && a.remapped_rows(d, &corr, &unc, &rpend, &fail) == kSuccess) {
    g.rows_correctable = corr;
    g.rows_uncorrectable = unc;
    g.rows_pending = rpend != 0;
    g.rows_failed = fail != 0;
  }
  return g;
}

template <class T>
std::string known(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : "?";
}
}  // namespace

Report query() {
  Report rep;
  const std::string path = env::value(env::Var::NvmlLibrary);
  Api a;
  a.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!a.lib) {
    const char* e = dlerror();
    rep.why = fmt::format("{} cannot be loaded ({}): no NVIDIA driver here", path, e ? e : "dlopen failed");
    return rep;
  }
  if (bind_all(a, rep.why)) {
    if (const Ret r = a.init(); r != kSuccess) {
      rep.why = fmt::format("NVML did not start: {}", a.error(r));
    } else {
      rep.loaded = true;
      char buf[96] = {};
      if (a.driver_version && a.driver_version(buf, sizeof buf) == kSuccess) rep.driver = buf;
      unsigned n = 0;
      if (const Ret c = a.count(&n); c != kSuccess)
        rep.why = fmt::format("NVML could not count the GPUs: {}", a.error(c));
      for (unsigned i = 0; i < n; ++i) {
        Device d = nullptr;
        if (const Ret h = a.handle(i, &d); h == kSuccess) {
          rep.gpus.push_back(read_gpu(a, i, d));
        } else {  // a GPU fallen off the bus, say: named, not skipped
          Gpu g;
          g.index = static_cast<int>(i);
          g.unreachable = a.error(h);
          rep.gpus.push_back(g);
        }
      }
      a.shutdown();
    }
  }
  dlclose(a.lib);
  return rep;
}

std::string describe(const Gpu& g) {
  if (!g.unreachable.empty()) return "NVML cannot reach it: " + g.unreachable;
  std::string s = fmt::format("{} ({}), memory {:.1f}/{:.1f} GiB used", g.name.empty() ? "?" : g.name,
                              g.uuid.empty() ? "?" : g.uuid, static_cast<double>(g.mem_used) / (1 << 30),
                              static_cast<double>(g.mem_total) / (1 << 30));
  if (!g.ecc_on)
    s += "; ECC not supported";
  else if (!*g.ecc_on)
    s += "; ECC off";
  else
    s += fmt::format("; ECC on, volatile errors {} uncorrected {} corrected, {} uncorrected over its life",
                     known(g.ecc_uncorrected_volatile), known(g.ecc_corrected_volatile),
                     known(g.ecc_uncorrected_aggregate));
  if (g.retired_single_bit || g.retired_double_bit || g.retired_pending)
    s += fmt::format("; retired pages {} single-bit {} double-bit{}", known(g.retired_single_bit),
                     known(g.retired_double_bit), g.retired_pending.value_or(false) ? ", retirement pending" : "");
  if (g.rows_correctable)
    s += fmt::format("; remapped rows {} correctable {} uncorrectable{}{}", *g.rows_correctable,
                     known(g.rows_uncorrectable), g.rows_pending.value_or(false) ? ", a remap pending" : "",
                     g.rows_failed.value_or(false) ? ", a remap FAILED" : "");
  return s;
}

std::string problems(const Gpu& g) {
  std::string s;
  auto add = [&](const std::string& p) { s += (s.empty() ? "" : "; ") + p; };
  if (!g.unreachable.empty()) add("NVML cannot reach it: " + g.unreachable);
  if (g.ecc_uncorrected_volatile.value_or(0) > 0)
    add(fmt::format("{} uncorrected ECC errors since the driver loaded", *g.ecc_uncorrected_volatile));
  if (g.retired_pending.value_or(false)) add("a page retirement waits for a GPU reset");
  if (g.rows_pending.value_or(false)) add("a row remap waits for a GPU reset");
  if (g.rows_failed.value_or(false)) add("a row remap failed (the GPU needs service)");
  return s;
}

}  // namespace parallm::nvml
