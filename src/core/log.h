// Logging through spdlog: plain lines on the console (what a user reads), the
// same lines with timestamps in the run's log file. Library code logs; it
// never prints directly.
#pragma once
#include <spdlog/spdlog.h>

#include <string>

namespace parallm::log {

// Console-only logger at info level; safe to call more than once.
void init_console();
// Adds (or replaces) a file sink at `path`, appended to or truncated; lines
// go to both console and file.
void add_file(const std::string& path, bool truncate = false);
// One error line to the file sink only (where one is attached): the error
// that ends a run, which the CLI prints to the console itself.
void error_to_file(const std::string& line);
void remove_file();
// "" while every line reached the file sink; else what failed ("cannot write
// <path>: No space left on device"). After a failure the file keeps its last
// whole line and takes no more.
std::string file_error();
void set_quiet(bool quiet);
// Ranks other than 0 log warnings and errors only (everything when
// LOG_FROM_ALL_RANKS=1), each line prefixed with [host:rank].
void set_rank(int rank, const std::string& host);  // warnings and errors only on the console

template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  spdlog::info(f, std::forward<Args>(a)...);
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  spdlog::warn(f, std::forward<Args>(a)...);
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  spdlog::error(f, std::forward<Args>(a)...);
}

}  // namespace parallm::log
