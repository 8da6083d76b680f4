// Token data loader over token files (train.bin / val.bin): little-endian
// uint16 ids (nanoGPT's), or uint32 where the vocabulary exceeds 65,536 (as
// meta.json's "dtype" says; a file without it is uint16).
//
// Each sample's T + 1 tokens are read with pread() from a file kept open, not
// through a memory map: a file truncated under a running job (a user, a
// script writing the dataset in place) then reads short, which is an IoError naming the file,
// instead of SIGBUS on a page that is gone. A step's B reads of T + 1 tokens
// come from the page cache in microseconds, next to a step of milliseconds.
//
// Sampling is a pure function: the g-th sample of step s of a split starts at
// random_below(n - T, seed, stream(split, s), g). A step's global batch is
// numbered micro-step-major, then rank, then row:
//   g = (micro * world + rank) * B + b
// so a rank reads only its slice, a resumed run sees exactly the batches it
// would have seen, and N ranks with micro batch b see the same samples as one
// rank with micro batch N*b.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fileio.h"

namespace parallm::data {

// The element type of token files: uint16 up to 65,536 tokens, uint32 above.
enum class TokenDtype { kU16, kU32 };
TokenDtype token_dtype_for(int64_t vocab_size);
const char* token_dtype_name(TokenDtype d);
inline size_t token_dtype_bytes(TokenDtype d) {
  return d == TokenDtype::kU16 ? 2 : 4;
}
// meta.json's "dtype" ("uint16", "uint32"; absent: uint16, as the files written
// before it); IoError naming `path` for anything else.
TokenDtype token_dtype_of_meta(const nlohmann::json& meta, const std::string& path);

enum class Split : uint32_t { Train = 0, Val = 1 };

class TokenFile {
 public:
  // IoError naming the file if it is missing, not a regular file, or its size
  // is not a whole number of ids (a torn tail).
  explicit TokenFile(const std::string& path, TokenDtype dtype = TokenDtype::kU16);
  int64_t size() const { return n_; }  // tokens, as at open
  const std::string& path() const { return file_.path(); }
  TokenDtype dtype() const { return dtype_; }
  // Tokens [start, start + count) into `out`, widened to uint32; IoError
  // naming the file if it has shrunk since it was opened.
  void read(int64_t start, int64_t count, uint32_t* out) const;
  // The largest token id in the file (one pass, in chunks).
  uint32_t max_token() const;

 private:
  RegularFile file_;
  TokenDtype dtype_;
  int64_t n_ = 0;
};

struct BatchSpec {
  int64_t batch_size = 12;  // B, per rank per micro-step
  int64_t seq_len = 64;     // T
  int64_t world = 1;
  int64_t rank = 0;
  // Context parallelism: the positions of each sample this rank keeps, in
  // its local order (x and y are then [B, positions.size()]); empty: all T.
  std::vector<int64_t> positions = {};
};

class Loader {
 public:
  // Opens data_dir/train.bin and data_dir/val.bin; checks that tokens fit vocab_size
  // and that each split holds more than seq_len + 1 tokens.
  Loader(const std::string& data_dir, int64_t vocab_size, BatchSpec spec, uint64_t seed);
  // Fills x, y ([B, T] int32 each, or [B, positions]) with this rank's slice of micro-step `micro` of step `step`.
  // Evaluation batches (eval = true) come from their own streams, so they never
  // coincide with training batches and are the same at every evaluation.
  void get(Split split, int64_t step, int64_t micro, int32_t* x, int32_t* y, bool eval = false) const;
  int64_t split_size(Split s) const { return (s == Split::Train ? train_ : val_).size(); }

 private:
  TokenDtype dtype_;
  TokenFile train_, val_;
  BatchSpec spec_;
  uint64_t seed_;
  mutable std::vector<uint32_t> row_;  // one sample's T + 1 tokens (made once: no allocation per step)
};

}  // namespace parallm::data
