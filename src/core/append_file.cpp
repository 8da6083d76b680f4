#include "core/append_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace parallm {

AppendFile::AppendFile(const std::string& path, bool truncate, const std::string& where) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  PARALLM_CHECK(fd_ >= 0, IoError, where, "cannot open {} for writing: {}", path, std::strerror(errno));
  // Records go at the end, by offset (pwrite ignores the offset under O_APPEND on Linux).
  struct stat st {};
  if (::fstat(fd_, &st) == 0) size_ = st.st_size;
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
