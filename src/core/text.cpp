#include "core/text.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace parallm {

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& where, const std::string& what) {
  std::vector<int64_t> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string_view piece(text.data() + begin, end - begin);
    const auto v = to_int(piece);
    PARALLM_CHECK(v.has_value(), ConfigError, where, "{}: \"{}\" is not an integer", what, std::string(piece));
    out.push_back(*v);
    begin = end + 1;
  }
  return out;
}

std::optional<int64_t> to_int(std::string_view s) {
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> to_decimal(std::string_view s) {
  const bool decimal = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
  });
  if (!decimal) return std::nullopt;
  const std::string z(s);  // strtod needs the terminator
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(z.c_str(), &end);
  if (end != z.c_str() + z.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace parallm
