#include "core/append_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/fileio.h"

namespace parallm {

namespace {
IoError not_regular(const std::string& where, const std::string& path, unsigned mode) {
  return IoError(where, fmt::format("{} is {}, not a regular file: remove it so the run can write its records there",
                                    path, file_kind(mode)));
}
}  // namespace

AppendFile::AppendFile(const std::string& path, bool truncate, const std::string& where) : path_(path) {
  // A FIFO at `path` must be refused, not wait for a reader: by its kind
  // before the open, and (O_NONBLOCK) if one appears in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) throw not_regular(where, path, st.st_mode);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  PARALLM_CHECK(fd_ >= 0, IoError, where, "cannot open {} for writing: {}", path, std::strerror(errno));
  const bool regular = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  if (!regular) {
    ::close(fd_);
    fd_ = -1;
    throw not_regular(where, path, st.st_mode);
  }
  if (truncate && ::ftruncate(fd_, 0) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    throw IoError(where, fmt::format("cannot empty {}: {}", path, std::strerror(e)));
  }
  // Records go at the end, by offset (pwrite ignores the offset under O_APPEND on Linux).
  size_ = truncate ? 0 : st.st_size;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool AppendFile::append(const char* data, size_t bytes) {
  if (!error_.empty()) return false;
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd_, data + done, bytes - done, size_ + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n == 0 ? EIO : errno;
      error_ = fmt::format("cannot write {}: {}", path_, std::strerror(e));
      // Cut a record written in part, so the file ends with a whole one.
      if (done > 0 && ::ftruncate(fd_, size_) != 0)
        error_ += fmt::format(" (and cutting its last, partial record failed: {})", std::strerror(errno));
      return false;
    }
    done += static_cast<size_t>(n);
  }
  size_ += static_cast<off_t>(bytes);
  return true;
}

}  // namespace parallm
