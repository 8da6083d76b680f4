#include "core/text.h"

#include <charconv>

#include "core/error.h"

namespace parallm {

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& where, const std::string& what) {
  std::vector<int64_t> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    int64_t v = 0;
    const char* first = text.data() + begin;
    const char* last = text.data() + end;
    const auto [p, ec] = std::from_chars(first, last, v);
    PARALLM_CHECK(ec == std::errc() && p == last && first != last, ConfigError, where, "{}: \"{}\" is not an integer",
                  what, std::string(first, last));
    out.push_back(v);
    begin = end + 1;
  }
  return out;
}

}  // namespace parallm
