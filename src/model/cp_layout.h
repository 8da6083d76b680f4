// Context parallelism's split of the sequence (issue 36): which global
// positions each cp rank holds. Pure functions; the model, the loader and the
// attention exchange all read this one table.
//
//   ring (zigzag): T is cut into 2C chunks of Tc = T / 2C; rank r holds
//     chunks r and 2C-1-r, in that order, so under a causal mask every rank
//     does the same attention work (Megatron-LM's load balancing);
//   ulysses (contiguous): rank r holds [r Tl, (r+1) Tl), Tl = T / C; the
//     attention itself runs on all T positions of T/C of the heads.
// A ring over the contiguous split (zigzag = false) exists for measuring the
// imbalance the zigzag removes (rank C-1 does about 2C-1 times rank 0's work).
// A rank's local rows are runs of consecutive global positions: one run
// (contiguous), two (zigzag).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace parallm::model {

enum class CpKind { Ring, Ulysses };
const char* cp_kind_name(CpKind k);

struct CpRun {
  int64_t local = 0, global = 0, len = 0;  // local rows [local, local+len) are global positions [global, global+len)
};
// A rank's runs: one or two (no allocation: the passes build them every time).
struct CpRuns {
  CpRun run[2];
  int n = 0;
  const CpRun* begin() const { return run; }
  const CpRun* end() const { return run + n; }
};

struct CpLayout {
  int size = 1;  // C
  int rank = 0;
  CpKind kind = CpKind::Ring;
  bool zigzag = true;  // ring only: false splits contiguously (the unbalanced baseline)
  bool contiguous() const { return kind == CpKind::Ulysses || !zigzag; }

  // The positions this rank holds of a sequence of T (T / C of them), as runs.
  // ShapeError when T does not split: zigzag needs T % (2C) == 0, contiguous T % C == 0.
  CpRuns runs(int64_t T) const;
  // Where global position `pos` lies: the rank holding it and its local row there.
  std::pair<int, int64_t> owner(int64_t pos, int64_t T) const;
  // The multiple a sequence length must be: 2C (zigzag), C (contiguous).
  int64_t multiple() const { return contiguous() ? size : 2 * size; }
  // The global position of each local row (T / C entries, increasing within each run).
  std::vector<int64_t> positions(int64_t T) const;
  // This rank's rows of [B, T, width] row-major `full` into [B, T/C, width] `local`.
  void slice(const float* full, float* local, int64_t B, int64_t T, int64_t width) const;
  void slice(const int32_t* full, int32_t* local, int64_t B, int64_t T) const;
  // The inverse: this rank's [B, T/C, width] rows written into their places of `full`.
  void place(const float* local, float* full, int64_t B, int64_t T, int64_t width) const;
};

// ConfigError naming the keys when T (model.block_size) or the heads do not
// split for `kind` at degree C (with tp: heads are split by tp first).
void check_cp_layout(CpKind kind, int C, int64_t T, int64_t n_head, int tp);

}  // namespace parallm::model
