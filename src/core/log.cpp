#include "core/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <mutex>

#include "core/append_file.h"
#include "core/env.h"

namespace parallm::log {

namespace {
// The run's log file: whole lines or none (core/append_file.h); a failed
// write is kept for file_error(), never thrown into the code that logged.
class RecordFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  RecordFileSink(const std::string& path, bool truncate) : file_(path, truncate, "log") {}
  std::string error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return file_.error();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_.append(line.data(), line.size());
  }
  void flush_() override {}

 private:
  AppendFile file_;
};

std::shared_ptr<spdlog::sinks::sink> g_console;
std::shared_ptr<RecordFileSink> g_file;

void rebuild() {
  std::vector<spdlog::sink_ptr> sinks{g_console};
  if (g_file) sinks.push_back(g_file);
  auto logger = std::make_shared<spdlog::logger>("parallm", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}
}  // namespace

void init_console() {
  if (g_console) return;
  g_console = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  g_console->set_pattern("%^%v%$");
  rebuild();
}

void add_file(const std::string& path, bool truncate) {
  init_console();
  g_file = std::make_shared<RecordFileSink>(path, truncate);
  g_file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  rebuild();
}

void error_to_file(const std::string& line) {
  if (!g_file) return;
  try {  // called while another error unwinds: nothing may replace it
    g_file->log(spdlog::details::log_msg("parallm", spdlog::level::err, line));
  } catch (...) {
  }
}

std::string file_error() {
  return g_file ? g_file->error() : std::string();
}

void remove_file() {
  g_file.reset();
  if (g_console) rebuild();
}

void set_rank(int rank, const std::string& host) {
  init_console();
  if (rank == 0) return;
  const bool verbose = env::value(env::Var::LogFromAllRanks) == "1";
  g_console->set_pattern(fmt::format("[{}:{}] %^%v%$", host, rank));
  g_console->set_level(verbose ? spdlog::level::trace : spdlog::level::warn);
}

void set_quiet(bool quiet) {
  init_console();
  g_console->set_level(quiet ? spdlog::level::warn : spdlog::level::trace);
}

}  // namespace parallm::log
