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

}  // namespace parallm::kernels::simd
