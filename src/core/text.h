// Small text parsers shared by the layers above (environment variables,
// command-line lists): strict, and their errors name what was being read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace parallm {

// "3,7,12" -> {3, 7, 12}. Every comma-separated piece must be a whole
// integer; otherwise ConfigError(where, "<what>: \"<piece>\" is not an integer").
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& where, const std::string& what);

}  // namespace parallm
