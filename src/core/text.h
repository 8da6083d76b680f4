// Small text parsers and formatters shared by the layers above (environment
// variables, command-line lists, durations, timestamps): strict, and their
// errors name what was being read.
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

// A duration: "5h50m", "90s", "1d12h", "1.5h", or a bare number of seconds
// ("360"); units d, h, m, s, each at most once, largest first. Seconds, or
// nothing (a negative or malformed text).
std::optional<double> to_duration_s(std::string_view s);
// Seconds as to_duration_s reads them back: "5h50m", "6s", "1h0m30s", "0.5s".
std::string format_duration(double seconds);
// Now in UTC, ISO 8601 to the second: "2026-11-29T11:35:13Z".
std::string utc_timestamp();

}  // namespace parallm
