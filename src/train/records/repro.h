// repro.json: what it takes to run a training job again, written by rank 0
// into the run directory each time a run starts or resumes (run_dir.h keeps
// every attempt's record). One JSON object:
//   attempt        1 for the scratch run, then 2, 3, ... for each resume
//   time_utc, cwd  when and where (the working directory relative paths meant)
//   argv           the command line as this process got it
//   config         the full resolved config (equal to config.json)
//   build          the binary: git revision, describe, dirty flag, build
//                  type, compiler, C++ flags, sanitizers, CUDA + archs
//   libraries      MPI, NCCL, oneDNN, CUDA runtime/driver, as `parallm
//                  doctor` reports them ("" where not built)
//   layout         world size, backend, mesh dims, and each rank's host,
//                  node, local rank and mesh coordinates
//   environment    rank 0's variables under an allow-list of prefixes (the
//                  threads', the GPUs', NCCL's, the launchers' and
//                  schedulers', parallm's own), never names that look secret
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace parallm::train {

struct Session;

// Where a run was started from: the command line as given (argv, the program
// first; the cli fills it) and each world rank's host (empty: open_session
// gathers them).
struct Invocation {
  std::vector<std::string> argv;
  std::vector<std::string> hosts;
};

// The record of this attempt (without its attempt number, which the run
// directory assigns). Needs the session's mesh and invocation's hosts.
nlohmann::json repro_record(const Session& s);

// The environment variables repro.json records: names starting with these.
const std::vector<std::string>& repro_env_prefixes();

}  // namespace parallm::train
