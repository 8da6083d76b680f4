// The registry of environment variables (see env.h). The table is constant
// data, so code that runs before main (the profiler's switch) can read it.
#include "core/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string_view>

extern char** environ;  // POSIX: the process's environment

#include "core/error.h"

namespace parallm::env {

namespace {
// In the order of Var (info() checks it).
const Info kVars[] = {
    {Var::Isa, "PARALLM_ISA", "",
     "cap on the instruction set the CPU kernels choose at run time: avx512, avx2 or baseline (default: the best "
     "this CPU has)"},
    {Var::Gemm, "PARALLM_GEMM", "onednn",
     "the CPU's fp32 GEMM: onednn, or parallm (parallm's packed GEMM, kernels/cpu/gemm.h)"},
    {Var::Attention, "PARALLM_ATTENTION", "cudnn",
     "GPU bf16 attention: cudnn (bitwise repeatable), cudnn-fast (dQ summed in no fixed order) or own (parallm's "
     "kernels)"},
    {Var::CublasLt, "PARALLM_CUBLASLT", "1", "0 turns off cuBLASLt's fused bias and residual epilogues on the GPU"},
    {Var::Profile, "PARALLM_PROFILE", "0",
     "1 (any value but 0) prints the time per kernel at the end of a run or a benchmark"},
    {Var::LogFromAllRanks, "LOG_FROM_ALL_RANKS", "0",
     "1: ranks other than 0 log everything, each line prefixed [host:rank] (otherwise only their warnings)"},
    {Var::TraceDir, "PARALLM_TRACE_DIR", ".",
     "directory of the stack dumps trace-<host>-<rank>.txt (kill -USR2, a communication timeout)"},
    {Var::CommPollUs, "PARALLM_COMM_POLL_US", "50",
     "microseconds the communication thread sleeps between polls of a pending MPI operation"},
    {Var::StoreDir, "PARALLM_STORE_DIR", "",
     "a directory all ranks share, through which NCCL's id is passed where there is no MPI (needs a job id)"},
    {Var::JobId, "PARALLM_JOB_ID", "",
     "the run's id in PARALLM_STORE_DIR (default: SLURM_JOB_ID with its step, or PBS_JOBID)"},
    {Var::NvmlLibrary, "PARALLM_NVML_LIBRARY", "libnvidia-ml.so.1",
     "the NVIDIA management library `parallm doctor` loads to read the GPUs' health (ECC, retired pages, remapped "
     "rows)"},
    {Var::FaultInfGrad, "PARALLM_FAULT_INF_GRAD", "",
     "testing: iterations (e.g. 3,7) whose reduced gradients get an inf on every rank, to exercise overflow "
     "handling"},
    {Var::FaultStopRank, "PARALLM_FAULT_STOP_RANK", "",
     "testing: R:I:S, world rank R sends itself signal S (kill or stop) halfway through iteration I's pipeline "
     "actions, to exercise a peer that dies or hangs mid-step"},
    {Var::FaultSpike, "PARALLM_FAULT_SPIKE", "",
     "testing: iterations (e.g. 30,31) whose mean loss and reduced gradients are multiplied by 100 on every rank, "
     "to exercise the loss-spike guard (train.skip_loss_zscore)"},
    {Var::FaultScale, "PARALLM_FAULT_SCALE", "",
     "testing: NAME:FACTOR:I, from iteration I on the parameter NAME (e.g. h.1.mlp.c_fc.weight) is multiplied by "
     "FACTOR before each step, compounding (1e5 overflows fp32 in a few steps), on the ranks that hold it, to "
     "exercise the numeric detector (train.detect_anomaly)"},
    {Var::FaultSlowRank, "PARALLM_FAULT_SLOW_RANK", "",
     "testing: R:MS, world rank R sleeps MS milliseconds in every training step's compute, to exercise the "
     "straggler report (train.straggler_pct)"},
    {Var::FaultSlowSave, "PARALLM_FAULT_SLOW_SAVE", "0",
     "testing: MS, a background checkpoint write (train.async_save) sleeps MS milliseconds after each 16 MiB it "
     "writes, so a test can kill it mid-write"},
    {Var::FaultLeak, "PARALLM_FAULT_LEAK", "0",
     "testing: KB, every rank keeps KB KiB more memory (touched, never freed) after each step, to exercise the "
     "resident-memory watchdog"},
};
}  // namespace

const std::vector<Info>& registry() {
  static const std::vector<Info> all(std::begin(kVars), std::end(kVars));
  return all;
}

const Info& info(Var v) {
  const auto i = static_cast<size_t>(v);
  PARALLM_CHECK(i < std::size(kVars) && kVars[i].var == v, InternalError, "env",
                "variable {} is not in the registry's order", static_cast<int>(v));
  return kVars[i];
}

const char* get(Var v) {
  const char* s = std::getenv(info(v).name);
  return s && *s ? s : nullptr;
}

std::string value(Var v) {
  const char* s = get(v);
  return s ? s : info(v).fallback;
}

int64_t integer(Var v, int64_t lo, int64_t hi) {
  const std::string s = value(v);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  const bool digits = !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-');
  PARALLM_CHECK(digits && *end == '\0' && errno == 0 && x >= lo && x <= hi, ConfigError, "env",
                "{}=\"{}\": expected an integer in [{}, {}] ({})", name(v), s, lo, hi, info(v).meaning);
  return x;
}

std::vector<std::pair<std::string, std::string>> with_prefixes(const std::vector<std::string>& prefixes) {
  static const char* const secret[] = {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY"};
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = entry.substr(0, eq);
    const auto starts = [&](const std::string& p) { return name.substr(0, p.size()) == p; };
    const auto names = [&](const char* w) { return name.find(w) != std::string_view::npos; };
    if (std::any_of(prefixes.begin(), prefixes.end(), starts) &&
        std::none_of(std::begin(secret), std::end(secret), names))
      out.emplace_back(std::string(name), std::string(entry.substr(eq + 1)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string help_table() {
  size_t wn = 0, wd = 0;
  for (const Info& i : kVars) {
    wn = std::max(wn, std::string_view(i.name).size());
    wd = std::max(wd, std::string_view(i.fallback).size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {}\n", "variable", wn, "default", std::max<size_t>(wd, 7), "meaning");
  for (const Info& i : kVars)
    out += fmt::format("{:<{}}  {:<{}}  {}\n", i.name, wn, *i.fallback ? i.fallback : "-", std::max<size_t>(wd, 7),
                       i.meaning);
  out +=
      "Unset and empty mean the default. Other programs' variables that parallm reads (OMP_NUM_THREADS, SLURM_*, "
      "OMPI_*, PMI*) keep their own meaning.\n";
  return out;
}

}  // namespace parallm::env
