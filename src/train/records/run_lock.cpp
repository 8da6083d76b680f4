#include "train/records/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "comm/topology.h"
#include "core/error.h"
#include "core/log.h"

namespace parallm::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWhere = "train.lock";

// What the lock file says of its holder ("" when empty or unreadable: a holder
// that has not written yet, or a foreign file).
std::string holder_text(int fd) {
  std::string text(4096, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("pid")) return "";
  return fmt::format("process {} on host {} (since {}{})", j.value("pid", 0), j.value("host", std::string("?")),
                     j.value("since", std::string("?")),
                     j.value("command", std::string()).empty() ? "" : ": " + j.value("command", std::string()));
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// Whether `fd` is still the file at `path` (a holder that released removes
// it: a lock taken on the removed file would lock nothing).
bool same_file(int fd, const std::string& path) {
  struct stat a {
  }, b{};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// `dir` absolute, without "." or ".." parts or a trailing separator.
fs::path absolute_dir(const std::string& dir, std::error_code& ec) {
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  return p.has_filename() ? p : p.parent_path();
}

}  // namespace

std::string RunLock::path_of(const std::string& dir) {
  return (fs::path(dir) / "run.lock").string();
}

RunLock::RunLock(const std::string& dir, const std::string& command) : dir_(dir), path_(path_of(dir)) {
  std::error_code ec;
  for (fs::path p = absolute_dir(dir, ec); !ec && p.has_relative_path() && !fs::exists(p, ec); p = p.parent_path())
    made_ = p.string();  // the outermost directory this lock creates
  fs::create_directories(dir, ec);
  PARALLM_CHECK(!ec, IoError, kWhere, "cannot create train.out_dir={}: {}", dir, ec.message());
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    PARALLM_CHECK(fd_ >= 0, IoError, kWhere, "cannot create {}: {}", path_, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string who = holder_text(fd_);
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK)
        throw ConfigError("config", fmt::format("train.out_dir={} is in use: {} holds {}; two runs in one directory "
                                                "would overwrite each other's checkpoints and records. Wait for it "
                                                "to end (or stop it), or give this run another train.out_dir",
                                                dir, who.empty() ? "another process" : who, path_));
      log::warn("cannot lock {} ({}): this file system has no locks, so nothing stops a second run in {}", path_,
                std::strerror(err), dir);
      return;
    }
    if (same_file(fd_, path_)) break;
    ::close(fd_);  // released and removed meanwhile: lock the file that is there now
    fd_ = -1;
    PARALLM_CHECK(attempt < 100, IoError, kWhere, "{} keeps being replaced by another process", path_);
  }
  const std::string stale = holder_text(fd_);
  if (!stale.empty()) log::warn("{}: taking over the lock of {}, which is no longer running", path_, stale);
  const std::string text = nlohmann::json{{"pid", static_cast<int64_t>(::getpid())},
                                          {"host", comm::this_host()},
                                          {"since", now_text()},
                                          {"command", command}}
                               .dump() +
                           "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    log::warn("could not write {}: {} (the lock holds; another run will not name this one)", path_,
              std::strerror(errno));
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  fs::remove(path_, ec);  // while still locked: a waiting run then locks a new file
  ::close(fd_);
  if (made_.empty()) return;
  // The directories this lock made, innermost first, as long as the run left them empty.
  for (fs::path p = absolute_dir(dir_, ec); !ec && fs::is_empty(p, ec) && !ec; p = p.parent_path()) {
    fs::remove(p, ec);
    if (p.string() == made_) break;
  }
}

}  // namespace parallm::train
