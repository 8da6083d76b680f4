// Validators for the subcommands' numeric options. Each states its valid
// range in --help (as the option's type) and, when a value is outside it,
// says which range and what it got: "--np: must be an integer in [1,
// 1048576], got -1". CLI11 prefixes the option's name.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>

namespace parallm::cli {

inline constexpr int64_t kMaxRanks = int64_t{1} << 20;  // launch -n/--ppn, plan -n
inline constexpr double kMaxTimeoutS = 7 * 24 * 3600;   // --timeout: a week

// An integer in [lo, hi].
CLI::Validator int_in(int64_t lo, int64_t hi);
// A finite decimal number in [lo, hi], its ends left out when lo_open, hi_open: (lo, hi), (lo, hi], [lo, hi).
CLI::Validator number_in(double lo, double hi, bool lo_open = false, bool hi_open = false);
// A thread count in [0, max_threads()] (core/host.h), naming the cores.
CLI::Validator thread_count();

}  // namespace parallm::cli
