#include "core/text.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>

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

std::optional<double> to_duration_s(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (const auto plain = to_decimal(s)) return *plain >= 0 ? plain : std::nullopt;
  static constexpr std::string_view kUnits = "dhms";
  static constexpr double kSeconds[] = {86400, 3600, 60, 1};
  double total = 0;
  size_t next_unit = 0;  // units in order, each once
  while (!s.empty()) {
    const size_t at = s.find_first_of(kUnits);
    if (at == 0 || at == std::string_view::npos) return std::nullopt;
    const size_t u = kUnits.find(s[at]);
    const auto v = to_decimal(s.substr(0, at));
    if (u < next_unit || !v || *v < 0) return std::nullopt;
    total += *v * kSeconds[u];
    next_unit = u + 1;
    s.remove_prefix(at + 1);
  }
  return total;
}

std::string format_duration(double seconds) {
  const auto whole = static_cast<int64_t>(seconds);
  if (static_cast<double>(whole) != seconds || whole < 60) return fmt::format("{:g}s", seconds);
  std::string out;
  const int64_t d = whole / 86400, h = whole / 3600 % 24, m = whole / 60 % 60, sec = whole % 60;
  if (d) out += fmt::format("{}d", d);
  if (h || (d && (m || sec))) out += fmt::format("{}h", h);
  if (m || ((d || h) && sec)) out += fmt::format("{}m", m);
  if (sec) out += fmt::format("{}s", sec);
  return out;
}

std::string utc_timestamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace parallm
