// The environment variables parallm reads, in one registry: each variable's
// name, its default and its meaning, listed by `parallm train --help-env`.
// Code reads a variable through its Var (env::value(Var::Profile)), never
// through std::getenv with a name (.ci/check-layers fails on that), so the
// list cannot miss one. Variables of other programs that parallm looks at
// (SLURM_*, OMPI_*, PMI*, HOME, PATH, ...) are read where they are needed.
//
// One rule for every variable: unset and empty mean the same, the default.
// Values are read when the code that uses them first runs; several are then
// kept for the process (the kernels' choices), so set them before starting.
// This header is C++17 (the CUDA kernels include it).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace parallm::env {

enum class Var {
  Isa,              // PARALLM_ISA
  Gemm,             // PARALLM_GEMM
  Attention,        // PARALLM_ATTENTION
  CublasLt,         // PARALLM_CUBLASLT
  Profile,          // PARALLM_PROFILE
  LogFromAllRanks,  // LOG_FROM_ALL_RANKS
  TraceDir,         // PARALLM_TRACE_DIR
  CommPollUs,       // PARALLM_COMM_POLL_US
  StoreDir,         // PARALLM_STORE_DIR
  JobId,            // PARALLM_JOB_ID
  NvmlLibrary,      // PARALLM_NVML_LIBRARY
  FaultInfGrad,     // PARALLM_FAULT_INF_GRAD
  FaultStopRank,    // PARALLM_FAULT_STOP_RANK
  FaultSpike,       // PARALLM_FAULT_SPIKE
  FaultScale,       // PARALLM_FAULT_SCALE
  FaultSlowRank,    // PARALLM_FAULT_SLOW_RANK
  FaultSlowSave,    // PARALLM_FAULT_SLOW_SAVE
  FaultLeak,        // PARALLM_FAULT_LEAK
};

struct Info {
  Var var;
  const char* name;
  const char* fallback;  // the value when unset or empty ("": none)
  const char* meaning;   // one line: what it changes, its values
};

// Every variable, in the order --help-env lists them (that of Var).
const std::vector<Info>& registry();
const Info& info(Var v);
inline const char* name(Var v) {
  return info(v).name;
}

// The value as set, or nullptr when unset or empty.
const char* get(Var v);
// The value as set, or the default when unset or empty.
std::string value(Var v);
// value() as an integer in [lo, hi]; a ConfigError naming the variable and
// the range otherwise.
int64_t integer(Var v, int64_t lo, int64_t hi);

// Every variable of this process's environment whose name starts with one
// of `prefixes` (a whole name is a prefix of itself) and names no secret
// (no TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL or KEY in it), sorted by
// name: what a run records of its environment (repro.json).
std::vector<std::pair<std::string, std::string>> with_prefixes(const std::vector<std::string>& prefixes);

// The table `parallm train --help-env` prints: name, default, meaning.
std::string help_table();

}  // namespace parallm::env
