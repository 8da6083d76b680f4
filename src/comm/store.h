// FileStore: a key/value rendezvous in a directory that every rank can read
// (on a cluster, a shared filesystem), for starting NCCL where there is no
// MPI to pass its unique id around.
//
// Design: a key is one file, "<dir>/parallm-<job>-<key>", written atomically
// (a temporary file, fsync, rename), so a reader sees nothing or the whole
// value. Readers poll for it under a deadline. The job id keeps runs that
// share the directory apart: it comes from PARALLM_JOB_ID, else the
// scheduler's (SLURM_JOB_ID with the step, PBS_JOBID), and there is no
// default, since two runs reading each other's files would hang. The process
// that set a key removes it when asked or when the store is destroyed.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/topology.h"

namespace parallm::comm {

class FileStore {
 public:
  // Creates `dir` if needed; ConfigError for an empty job id or one without
  // a single usable character, IoError when the directory cannot be made.
  FileStore(std::string dir, const std::string& job);
  ~FileStore();  // removes the keys this object set
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  // Keys: letters, digits, '-', '_' and '.' (ConfigError otherwise).
  void set(const std::string& key, const std::string& value);
  // Waits until the key exists; CommError naming the file after `timeout_s`.
  std::string get(const std::string& key, double timeout_s) const;
  void remove(const std::string& key);
  std::string path(const std::string& key) const;
  const std::string& dir() const { return dir_; }

  // PARALLM_STORE_DIR and the job id from the environment; nullptr when
  // PARALLM_STORE_DIR is unset. ConfigError when it is set but no job id is.
  static std::unique_ptr<FileStore> from_env(const EnvLookup& env = process_env());
  // The run's job id as from_env reads it ("" when the environment has none).
  static std::string job_id(const EnvLookup& env = process_env());

 private:
  std::string dir_, job_;
  std::vector<std::string> mine_;
};

}  // namespace parallm::comm
