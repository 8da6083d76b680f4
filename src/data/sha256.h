// SHA-256 (OpenSSL's) as lowercase hex: checks downloaded files and names a
// tokenizer by its content.
#pragma once
#include <string>
#include <string_view>

namespace parallm::data {

std::string sha256_hex(std::string_view bytes);
// Of a whole file, read in blocks; IoError naming the file if it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace parallm::data
