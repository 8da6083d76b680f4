// One run at a time in a run directory (train.out_dir). The lead rank holds
// <out_dir>/run.lock for the whole run: an flock(2) lock on the file, which
// the kernel drops however the process ends, and in the file who holds it
// (process id, host, start time, command line). A second run finds the lock
// held and is refused, naming that process and host, before it reads a
// checkpoint or writes anything: two runs in one directory would overwrite
// each other's checkpoints and records (issue 44, B2). A lock file whose
// process is gone (the flock is free, the file still names it: a killed run)
// is taken over, said in a warning. The file is removed when the run ends;
// a directory the lock created is removed too if the run left nothing else in
// it (a run refused by a later check). On a file system without locks the
// run goes on, said in a warning.
#pragma once
#include <string>

namespace parallm::train {

class RunLock {
 public:
  // Takes the lock of `dir` (created when missing); `command` is recorded for
  // the message another run would print. ConfigError naming the holder when
  // another process holds it; IoError when the file cannot be made.
  RunLock(const std::string& dir, const std::string& command);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  // "<dir>/run.lock".
  static std::string path_of(const std::string& dir);

 private:
  std::string dir_, path_;
  int fd_ = -1;
  std::string made_;  // the outermost directory the lock created ("" when dir existed)
};

}  // namespace parallm::train
