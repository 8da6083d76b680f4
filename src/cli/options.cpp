#include "cli/options.h"

#include <fmt/format.h>

#include "core/host.h"
#include "core/text.h"

namespace parallm::cli {

CLI::Validator int_in(int64_t lo, int64_t hi) {
  const std::string range = fmt::format("[{}, {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        const auto v = to_int(s);
        if (!v || *v < lo || *v > hi) return fmt::format("must be an integer in {}, got \"{}\"", range, s);
        return "";
      },
      "INT in " + range);
}

CLI::Validator number_in(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string range = fmt::format("{}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
  return CLI::Validator(
      [lo, hi, lo_open, hi_open, range](std::string& s) -> std::string {
        const auto v = to_decimal(s);
        if (!v || (lo_open ? *v <= lo : *v < lo) || (hi_open ? *v >= hi : *v > hi))
          return fmt::format("must be a number in {}, got \"{}\"", range, s);
        return "";
      },
      "NUMBER in " + range);
}

CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const auto v = to_int(s);
        const int cores = usable_cores(), limit = max_threads();
        if (!v || *v < 0 || *v > limit)
          return fmt::format(
              "must be an integer in [0, {}] ({} threads per core on the {} core{} this process may use; 0 = "
              "OMP_NUM_THREADS or the cores per rank), got \"{}\"",
              limit, kMaxThreadsPerCore, cores, cores == 1 ? "" : "s", s);
        return "";
      },
      "INT in [0, 4 x cores]");
}

}  // namespace parallm::cli
