// Token data loader over memory-mapped uint16 files (train.bin / val.bin).
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
#include <string>

namespace parallm::data {

enum class Split : uint32_t { Train = 0, Val = 1 };

class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  int64_t size() const { return n_; }
  const uint16_t* data() const { return data_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint16_t* data_ = nullptr;
  int64_t n_ = 0;
  size_t map_bytes_ = 0;
};

struct BatchSpec {
  int64_t batch_size = 12;  // B, per rank per micro-step
  int64_t seq_len = 64;     // T
  int64_t world = 1;
  int64_t rank = 0;
};

class Loader {
 public:
  // Opens data_dir/train.bin and data_dir/val.bin; checks that tokens fit vocab_size
  // and that each split holds more than seq_len + 1 tokens.
  Loader(const std::string& data_dir, int64_t vocab_size, BatchSpec spec, uint64_t seed);
  // Fills x, y ([B, T] int32 each) with this rank's slice of micro-step `micro` of step `step`.
  // Evaluation batches (eval = true) come from their own streams, so they never
  // coincide with training batches and are the same at every evaluation.
  void get(Split split, int64_t step, int64_t micro, int32_t* x, int32_t* y, bool eval = false) const;
  int64_t split_size(Split s) const { return (s == Split::Train ? train_ : val_).size(); }

 private:
  TokenFile train_, val_;
  BatchSpec spec_;
  uint64_t seed_;
};

}  // namespace parallm::data
