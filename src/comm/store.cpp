#include "comm/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/fileio.h"

namespace parallm::comm {

namespace fs = std::filesystem;

namespace {

bool safe_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

}  // namespace

FileStore::FileStore(std::string dir, const std::string& job) : dir_(std::move(dir)) {
  for (char c : job) job_ += safe_char(c) ? c : '_';
  PARALLM_CHECK(!dir_.empty(), ConfigError, "comm.store", "the store directory is empty");
  PARALLM_CHECK(std::any_of(job.begin(), job.end(), [](char c) { return safe_char(c) && c != '.'; }), ConfigError,
                "comm.store", "job id \"{}\" has no letter or digit: set PARALLM_JOB_ID to a value unique to this run",
                job);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  PARALLM_CHECK(!ec && fs::is_directory(dir_), IoError, "comm.store", "cannot use {} as the store directory: {}", dir_,
                ec ? ec.message() : "not a directory");
}

FileStore::~FileStore() {
  for (const auto& k : mine_) {
    std::error_code ec;
    fs::remove(path(k), ec);  // best effort: a destructor does not throw
  }
}

std::string FileStore::path(const std::string& key) const {
  PARALLM_CHECK(!key.empty() && std::all_of(key.begin(), key.end(), safe_char), ConfigError, "comm.store",
                "key \"{}\": use letters, digits, '-', '_' and '.'", key);
  return (fs::path(dir_) / fmt::format("parallm-{}-{}", job_, key)).string();
}

void FileStore::set(const std::string& key, const std::string& value) {
  write_file_atomic(path(key), {{value.data(), value.size()}});
  if (std::find(mine_.begin(), mine_.end(), key) == mine_.end()) mine_.push_back(key);
}

std::string FileStore::get(const std::string& key, double timeout_s) const {
  const std::string p = path(key);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto nap = std::chrono::milliseconds(1);
  for (;;) {
    std::error_code ec;
    if (fs::exists(p, ec)) return read_text_file(p, "comm.store");
    if (std::chrono::steady_clock::now() > until)
      throw CommError("comm.store",
                      fmt::format("{} did not appear within {:.1f} s (comm.timeout_s): the rank that writes it (rank "
                                  "0) did not start, failed, or sees another directory as PARALLM_STORE_DIR",
                                  p, timeout_s));
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::milliseconds(50));
  }
}

void FileStore::remove(const std::string& key) {
  std::error_code ec;
  fs::remove(path(key), ec);
  mine_.erase(std::remove(mine_.begin(), mine_.end(), key), mine_.end());
}

std::string FileStore::job_id(const EnvLookup& env) {
  auto get = [&](const char* k) -> std::string {
    const char* v = env(k);
    return v && *v ? v : "";
  };
  if (std::string j = get("PARALLM_JOB_ID"); !j.empty()) return j;
  if (std::string j = get("SLURM_JOB_ID"); !j.empty()) {
    const std::string step = get("SLURM_STEP_ID");
    return step.empty() ? j : j + "." + step;
  }
  return get("PBS_JOBID");
}

std::unique_ptr<FileStore> FileStore::from_env(const EnvLookup& env) {
  const char* dir = env("PARALLM_STORE_DIR");
  if (!dir || !*dir) return nullptr;
  const std::string job = job_id(env);
  PARALLM_CHECK(!job.empty(), ConfigError, "comm.store",
                "PARALLM_STORE_DIR={} but no job id: set PARALLM_JOB_ID to a value unique to this run (under Slurm "
                "or PBS the job id is read from SLURM_JOB_ID or PBS_JOBID)",
                dir);
  return std::make_unique<FileStore>(dir, job);
}

}  // namespace parallm::comm
