// Run outputs a tool can read: metrics.jsonl (one JSON object per line,
// flushed as written) and the progress bar shown when stdout is a terminal.
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace parallm::train {

class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
};

// A one-line progress bar redrawn in place; log lines printed through
// print() appear above it. Inactive (plain lines only) when stdout is not a
// terminal or when disabled.
class Progress {
 public:
  Progress(int64_t first, int64_t last, bool enabled);
  ~Progress();
  void update(int64_t iter, const std::string& status);
  void print(const std::string& line);  // a log line (also goes to the log file)

 private:
  void draw();
  void clear();
  bool active_;
  int64_t first_, last_, iter_ = 0;
  std::string status_;
};

}  // namespace parallm::train
