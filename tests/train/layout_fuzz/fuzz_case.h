// One fuzz case end to end: the one-rank reference (cached per model,
// training and global batch within a session), the first leg at the drawn
// layout, the invalid draw, and the resume of the first leg's checkpoint at
// the second layout; each leg's per-step loss and gradient norm and its
// final parameters against the reference's. A failure's report names the
// seed, both layouts, the exact command lines and the first value that
// differed.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "train/layout_fuzz/draw.h"
#include "train/layout_fuzz/run.h"

namespace layout_fuzz {

struct Options {
  Tools tools;
  std::string work;         // scratch root: the dataset, references, one directory per case
  std::string self;         // this program's path, for the replay line
  std::string replay_args;  // the options a replay needs besides --seed (" --lr 0.003 ...")
  bool keep = false;        // keep every case's directories (else only a failed case's)
  double tol = 1e-5;        // relative, per step: loss and gradient norm
  double param_tol = 1e-2;  // per tensor: rms(a - b) / learning rate (see fuzz_case.cpp)
};

struct Outcome {
  bool ok = true;
  std::string report;                     // the failure, ready to print
  double loss = 0, grad = 0, params = 0;  // the largest relative differences seen
  std::string params_at;                  // the tensor of the largest parameter difference
  double seconds = 0;
  long flip = -1;  // MoE: the first step whose tokens per expert differ from one rank's (-1: none)
};

class Fuzzer {
 public:
  // Writes the corpus and prepares the dataset under opt.work (ConfigError-free or throws).
  explicit Fuzzer(Options opt);
  Outcome run_case(const Case& c);
  // The commands of a case, without running them (--dry-run).
  std::string commands(const Case& c);

 private:
  std::string reference(const Case& c, std::string* line, std::string* error);
  Options opt_;
  std::string data_;
  std::map<std::string, std::string> refs_;  // the reference's command keys -> its directory
  int next_ref_ = 0;
};

}  // namespace layout_fuzz
