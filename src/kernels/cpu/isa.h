// The CPU's vector ISA, for kernels that select their code at run time
// (register tiles sized to the register file; see small_gemm.cpp).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PARALLM_ISA_DISPATCH 1
#else
#define PARALLM_ISA_DISPATCH 0
#endif

namespace parallm::kernels::simd {

enum class Isa { Baseline, Avx2, Avx512 };

// The widest ISA this CPU runs (AVX2 counts only with FMA), read once.
// PARALLM_ISA=avx2|baseline caps it, so every run-time-selected path can be
// tested on one machine (the PARALLM_CLONES kernels of simd.h are bound at
// load time and ignore it); asking for more than the CPU has keeps what it has.
Isa isa();
const char* isa_name(Isa isa);
// What isa() makes of a CPU that has `have` and a PARALLM_ISA value (null or
// empty: no cap); throws ConfigError naming a value it does not know.
Isa cap_isa(Isa have, const char* request);

// The one of three implementations that suits isa(): the wider ones are
// compiled only where PARALLM_ISA_DISPATCH holds, so they may be null elsewhere.
template <class Fn>
Fn by_isa(Fn avx512, Fn avx2, Fn baseline) {
  switch (isa()) {
    case Isa::Avx512:
      return avx512 ? avx512 : baseline;
    case Isa::Avx2:
      return avx2 ? avx2 : baseline;
    case Isa::Baseline:
      break;
  }
  return baseline;
}

}  // namespace parallm::kernels::simd
