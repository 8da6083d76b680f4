// safetensors, Hugging Face's weight file format, read and written here (the
// reference implementation is Rust; the format is small): 8 bytes of header
// length N (u64, little-endian), N bytes of JSON, then the data buffer.
// The JSON maps each tensor's name to {"dtype", "shape", "data_offsets":
// [begin, end)} (offsets into the buffer); "__metadata__" maps strings to
// strings.
//
// The reader checks what the reference reader checks, each with its own
// error naming the file and the tensor: a header length past the file (or
// over 100 MB), JSON that is not an object, a key seen twice, an unknown
// dtype, a shape that is not a list of sizes, offsets whose span is not
// the shape's size, tensors that leave a gap or overlap, a buffer that is
// not exactly covered (bytes left over, or missing: a truncated file).
// Values are read as float from F32, BF16 and F16.
// The writer writes F32 (or BF16, rounded to nearest even), tensors in name order back to back, the header
// padded with spaces to a multiple of 8, {"format": "pt"} in the metadata
// (transformers wants it), through <path>.tmp and a rename.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/fileio.h"

namespace parallm::hf {

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // in the data buffer
  int64_t numel() const;
};

class SafetensorsReader {
 public:
  // Opens and validates `path` (IoError naming the problem).
  explicit SafetensorsReader(const std::string& path);
  const std::vector<StTensor>& tensors() const { return tensors_; }  // by offset
  const StTensor* find(const std::string& name) const;               // nullptr if none
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor t's values as floats (F32, BF16, F16; IoError for another dtype), numel() of them.
  void read(const StTensor& t, float* out) const;
  const std::string& path() const { return file_.path(); }

 private:
  RegularFile file_;
  uint64_t data_start_ = 0;
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct StWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
  bool bf16 = false;  // written as BF16
};
void write_safetensors(const std::string& path, const std::vector<StWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace parallm::hf
