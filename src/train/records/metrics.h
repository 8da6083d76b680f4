// Run outputs a tool can read: metrics.jsonl (one JSON object per line,
// written whole or not at all: core/append_file.h) and the progress bar shown
// when stdout is a terminal.
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/append_file.h"

namespace parallm::train {

class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool append) : file_(path, !append, "metrics") {}
  // One line; a failed write keeps it (and every later one) in unwritten()
  // and sets error().
  void write(const nlohmann::json& record) {
    const std::string s = record.dump() + "\n";
    if (!file_.append(s.data(), s.size())) unwritten_.push_back(record);
  }
  const std::string& error() const { return file_.error(); }
  const nlohmann::json& unwritten() const { return unwritten_; }

 private:
  AppendFile file_;
  nlohmann::json unwritten_ = nlohmann::json::array();
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
