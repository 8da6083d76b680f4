// The CPU's vector ISA for run-time kernel selection (see simd.h): the
// widest the CPU reports, optionally capped by PARALLM_ISA for tests.
#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <string>

#include "core/env.h"
#include "core/error.h"
#include "kernels/matmul.h"

namespace parallm::kernels::simd {

namespace {
Isa detect() {
#if PARALLM_ISA_DISPATCH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
  return Isa::Baseline;
}
}  // namespace

Isa cap_isa(Isa have, const char* v) {
  if (!v || !*v) return have;
  for (Isa want : {Isa::Avx512, Isa::Avx2, Isa::Baseline})
    if (std::string(v) == isa_name(want)) return static_cast<int>(want) < static_cast<int>(have) ? want : have;
  throw ConfigError("kernels.isa", fmt::format("PARALLM_ISA='{}' is not one of avx512, avx2, baseline", v));
}

Isa isa() {
  static const Isa v = cap_isa(detect(), env::get(env::Var::Isa));
  return v;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    case Isa::Baseline:
      break;
  }
  return "baseline";
}

}  // namespace parallm::kernels::simd

namespace parallm::kernels {
std::string cpu_kernel_isa() {
  return simd::isa_name(simd::isa());
}
}  // namespace parallm::kernels
