// An append-only record file (metrics.jsonl, train.log) whose records land
// whole or not at all. A write that fails (a full disk, a quota, a vanished
// mount) cuts the file back to its last whole record, and the file refuses
// every later record; error() says what failed, so the run that owns it can
// stop with a clear error instead of training on while its records are lost.
// Writes never throw: a record file's failure is the caller's to report.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace parallm {

class AppendFile {
 public:
  // Opens (creates) `path`, emptied when `truncate`; IoError "[where] cannot open ..." otherwise.
  AppendFile(const std::string& path, bool truncate, const std::string& where);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  // Appends `bytes` (one or more whole records); false if this or an earlier write failed.
  bool append(const char* data, size_t bytes);
  // "" while every write succeeded; else "cannot write <path>: <reason>".
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  off_t size_ = 0;  // bytes of whole records
  std::string error_;
};

}  // namespace parallm
