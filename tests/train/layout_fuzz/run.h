// The layout fuzzer's running half: `parallm train` as child processes
// (under mpirun for more than one rank, one thread a rank), their command
// lines as a shell replays them, and what the runs left: metrics.jsonl's
// per-step loss and gradient norm, and a checkpoint's whole flat parameter
// buffer (read with the library's checkpoint reader, so any format and any
// layout's checkpoint reads the same way).
#pragma once
#include <map>
#include <string>
#include <vector>

namespace layout_fuzz {

struct Tools {
  std::string parallm;                    // the program under test
  std::string mpirun;                     // launcher for several ranks
  std::vector<std::string> mpirun_flags;  // e.g. --oversubscribe --allow-run-as-root --bind-to none
  double timeout_s = 180;                 // a run longer than this is killed (a hang is a failure)
};

// One `parallm train` (or any parallm subcommand) on `world` ranks.
struct Command {
  int world = 1;
  std::vector<std::string> args;  // after the program: "train", key=value...
  std::string log;                // stdout and stderr go here
};

struct RunResult {
  int rc = -1;  // exit code; 128 + signal if killed
  bool timed_out = false;
  double seconds = 0;
  std::string output;  // the log's text (its last 64 KiB)
};

// The environment every run gets (one OpenMP thread a rank; Open MPI as root).
void set_run_environment();
std::vector<std::string> argv_of(const Tools& t, const Command& c);
// The command as one shell line, with the environment it runs in.
std::string shell_line(const Tools& t, const Command& c);
RunResult run(const Tools& t, const Command& c);

struct StepRecord {
  double loss = 0, grad_norm = -1;  // -1: absent
  double val_loss = -1;             // evaluations: the val loss (loss is then the train split's)
  std::string moe_tokens;           // MoE: the step's tokens per expert by layer (JSON), "" for a dense model
  std::string moe_choices;          // MoE: every token's choices, hashed (the record's hex digest), "" for dense
};
// The records of `kind` ("train" or "eval") in `out_dir`/metrics.jsonl by step (the last of each step).
std::map<long, StepRecord> read_steps(const std::string& out_dir, const std::string& kind = "train");

struct Params {
  std::vector<float> flat;
  struct Tensor {
    std::string name;
    long offset = 0, numel = 0;
  };
  std::vector<Tensor> tensors;
};
// The parameters a checkpoint directory holds (its parameter table and flat buffer).
Params read_params(const std::string& ckpt_dir);
// <out_dir>/ckpt-NNNNNNNN: the checkpoint saved before iteration `next`.
std::string step_ckpt(const std::string& out_dir, long next);

}  // namespace layout_fuzz
