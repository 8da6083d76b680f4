// Character-level dataset preparation, byte-compatible with nanoGPT's
// data/shakespeare_char/prepare.py: the vocabulary is the sorted set of
// Unicode code points of the text, the first 90% (in code points) is train,
// the rest val, each written as little-endian uint16 token ids (uint32 past
// 65,536 distinct characters, meta.json's "dtype" says which) to
// train.bin / val.bin. The vocabulary goes to meta.json (itos as a list).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace parallm::data {

struct PrepareResult {
  int64_t chars = 0;  // code points in the corpus
  int64_t vocab_size = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};

// Decodes UTF-8 (throws ConfigError with the byte offset of invalid input).
std::vector<char32_t> decode_utf8(const std::string& bytes, const std::string& what);
std::string encode_utf8(char32_t cp);

PrepareResult prepare_char_dataset(const std::string& input_path, const std::string& out_dir);

// dir/meta.json as written by prepare; IoError naming the file if it is
// missing (saying how to prepare the dataset) or not a JSON object.
nlohmann::json read_dataset_meta(const std::string& dir);

// Fetches url to path (libcurl). Throws IoError with the reason on failure.
void download_file(const std::string& url, const std::string& path);

extern const char* const kShakespeareUrl;

}  // namespace parallm::data
