// Small text parsers shared by the layers above (environment variables,
// command-line lists): strict, and their errors name what was being read.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parallm {

// "3,7,12" -> {3, 7, 12}. Every comma-separated piece must be a whole
// integer; otherwise ConfigError(where, "<what>: \"<piece>\" is not an integer").
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& where, const std::string& what);

// The whole of `s` as a decimal integer ("-12"), or nothing.
std::optional<int64_t> to_int(std::string_view s);
// The whole of `s` as a finite decimal number ("1e-3", "+.5"), or nothing:
// no hex, inf or nan, which std::stod would accept.
std::optional<double> to_decimal(std::string_view s);

}  // namespace parallm
