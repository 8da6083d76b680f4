// train.skip_batches: global batch indices a run never feeds (PaLM's
// rollback recipe: resume before a loss spike, skip the batches around it).
// A batch index is the iteration number of the straight run: iteration `it`
// reads batch data_index(it), the it-th index (from 0) that is not skipped, so
// the order of the batches left is unchanged, and with nothing skipped
// data_index is the identity (a run without the key reads what it always did).
// Dropout and the other per-step randomness stay keyed by the iteration.
// Written "a:b,c:d" (inclusive ranges, ascending and disjoint; "a" alone is
// a:a); it is part of the run's config, so a checkpoint carries it and a later
// resume keeps skipping.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace parallm::train {

struct BatchSkip {
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [a, b], ascending, disjoint

  // The ranges of `text` ("" for none); ConfigError naming `key` and the range at fault.
  static BatchSkip parse(const std::string& key, const std::string& text);
  std::string text() const;  // parse's form
  // The global batch index iteration `it` reads.
  int64_t data_index(int64_t it) const;
  // ConfigError naming `key` when a range lies wholly past the last batch a
  // run to iteration `max_iters` reads (it would never skip anything).
  void check_reach(const std::string& key, int64_t max_iters) const;
  bool operator==(const BatchSkip& o) const { return ranges == o.ranges; }
};

}  // namespace parallm::train
