// The run's keys as one table: each key's type, help text, range, and its
// setter and getter on RunConfig. --help-keys prints it; set(), to_json(),
// the range check and a resume's agreement read it, so none can disagree.
// Internal to train/config (config_keys.cpp builds it by section).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/text.h"
#include "train/config/config.h"

namespace parallm::train::config_table {

// A numeric key's valid values: from lo to hi, either end open or closed;
// `hi_now`, when set, is this machine's bound instead of hi (train.threads).
// validate() checks every key against its range and --help-keys prints it,
// so the two cannot disagree.
struct Range {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  int (*hi_now)() = nullptr;
  double upper() const { return hi_now ? hi_now() : hi; }
  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < upper() : v <= upper()); }
  std::string text() const {
    return fmt::format("{}{}, {}{}", lo_open ? "(" : "[", bound_text(lo), bound_text(upper()), hi_open ? ")" : "]");
  }
  static std::string bound_text(double v) {
    if (v >= 9.2e18 && v < 9.3e18) return "2^63 - 1";
    int e = 0;
    if (v >= 4294967296.0 && std::frexp(v, &e) == 0.5) return fmt::format("2^{}", e - 1);
    return v == std::floor(v) && std::abs(v) < 1e16 ? fmt::format("{:.0f}", v) : fmt::format("{}", v);
  }
};

struct Key {
  std::string type, help;
  std::function<void(RunConfig&, const std::string&, const std::string&)> set;
  std::function<nlohmann::json(const RunConfig&)> get;
  std::optional<Range> range;  // numeric keys
};

using KeyTable = std::map<std::string, Key>;

constexpr int64_t kMaxTokensPerBatch = INT32_MAX;  // model.batch_size x model.block_size

// Every key, in one table.
const KeyTable& keys();
// ConfigError when the directory of a switch file (train.kill_switch,
// train.save_switch) does not exist.
void check_switch(const std::string& key, const std::string& path);

}  // namespace parallm::train::config_table
