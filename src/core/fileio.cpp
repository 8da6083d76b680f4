#include "core/fileio.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace parallm {

namespace {
// Loops over partial reads/writes and EINTR; returns errno on failure, 0 on success.
int transfer(int fd, char* buf, size_t bytes, bool writing) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = writing ? ::write(fd, buf + done, bytes - done) : ::read(fd, buf + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? EIO : errno;
    done += static_cast<size_t>(n);
  }
  return 0;
}
}  // namespace

FileWriter::FileWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  PARALLM_CHECK(fd_ >= 0, IoError, "io.write", "cannot create {}: {}", path, std::strerror(errno));
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::append(const void* data, size_t bytes) {
  PARALLM_CHECK(fd_ >= 0, InternalError, "io.write", "{} was already closed", path_);
  const int e = transfer(fd_, static_cast<char*>(const_cast<void*>(data)), bytes, true);
  if (e != 0) {
    ::close(fd_);
    fd_ = -1;
    throw IoError("io.write", fmt::format("write to {} failed: {} (disk full?)", path_, std::strerror(e)));
  }
}

void FileWriter::finish() {
  PARALLM_CHECK(fd_ >= 0, InternalError, "io.write", "{} was already closed", path_);
  // A full disk or a network filesystem may report the failure only here.
  const int synced = ::fsync(fd_) == 0 ? 0 : errno;
  const int closed = ::close(fd_) == 0 ? 0 : errno;
  fd_ = -1;
  PARALLM_CHECK(synced == 0 && closed == 0, IoError, "io.write", "write to {} failed: {} (disk full?)", path_,
                std::strerror(synced ? synced : closed));
}

void write_file(const std::string& path, std::initializer_list<ConstFilePiece> pieces) {
  FileWriter f(path);
  for (const auto& p : pieces) f.append(p.data, p.bytes);
  f.finish();
}

void write_file_atomic(const std::string& path, std::initializer_list<ConstFilePiece> pieces) {
  const std::string tmp = path + ".tmp";
  try {
    write_file(tmp, pieces);
    PARALLM_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, IoError, "io.write", "cannot rename {} to {}: {}", tmp,
                  path, std::strerror(errno));
  } catch (const IoError&) {
    std::remove(tmp.c_str());  // no partial file is left to fill the disk; `path` is unchanged
    throw;
  }
}

std::string file_kind(unsigned mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

namespace {
[[noreturn]] void refuse_kind(const std::string& path, const std::string& where, unsigned mode) {
  throw IoError(where, fmt::format("{} is {}, not a regular file: parallm reads data, configs and checkpoints only "
                                   "from regular files; put the file itself at that path",
                                   path, file_kind(mode)));
}
}  // namespace

RegularFile::RegularFile(const std::string& path, const std::string& where, const std::string& hint) : path_(path) {
  struct stat st {};
  // stat first: opening a device can have side effects, and a socket cannot be opened.
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) refuse_kind(path, where, st.st_mode);
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  PARALLM_CHECK(fd_ >= 0, IoError, where, "cannot read {}: {}{}", path, std::strerror(errno), hint);
  const bool stat_ok = ::fstat(fd_, &st) == 0;
  const int e = errno;
  if (!stat_ok || !S_ISREG(st.st_mode)) {  // replaced between stat and open
    ::close(fd_);
    if (stat_ok) refuse_kind(path, where, st.st_mode);
    throw IoError(where, fmt::format("cannot stat {}: {}", path, std::strerror(e)));
  }
  size_ = static_cast<size_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

size_t RegularFile::current_size() const {
  struct stat st {};
  PARALLM_CHECK(::fstat(fd_, &st) == 0, IoError, "io.read", "cannot stat {}: {}", path_, std::strerror(errno));
  return static_cast<size_t>(st.st_size);
}

size_t RegularFile::read_at(size_t offset, void* out, size_t bytes) const {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, static_cast<char*>(out) + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    PARALLM_CHECK(n >= 0, IoError, "io.read", "read of {} failed: {}", path_, std::strerror(errno));
    if (n == 0) break;  // end of file
    done += static_cast<size_t>(n);
  }
  return done;
}

void read_file(const std::string& path, std::initializer_list<FilePiece> pieces) {
  size_t want = 0;
  for (const auto& p : pieces) want += p.bytes;
  const RegularFile f(path, "io.read");
  PARALLM_CHECK(f.size() == want, IoError, "io.read", "{} has {} bytes, expected {} (truncated or another model?)",
                path, f.size(), want);
  size_t offset = 0;
  for (const auto& p : pieces) {
    const size_t got = f.read_at(offset, p.data, p.bytes);
    PARALLM_CHECK(got == p.bytes, IoError, "io.read", "{} ended at byte {} while being read, expected {} bytes", path,
                  offset + got, want);
    offset += p.bytes;
  }
}

void read_file_range(const std::string& path, size_t file_size, size_t offset, void* out, size_t bytes) {
  const RegularFile f(path, "io.read");
  PARALLM_CHECK(f.size() == file_size && offset + bytes <= file_size, IoError, "io.read",
                "{} has {} bytes, expected {} (truncated or another model?)", path, f.size(), file_size);
  const size_t got = f.read_at(offset, out, bytes);
  PARALLM_CHECK(got == bytes, IoError, "io.read", "{} ended at byte {} while being read, expected {} bytes", path,
                offset + got, file_size);
}

void make_directories(const std::string& path, const std::string& where, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  PARALLM_CHECK(!ec && std::filesystem::is_directory(path), IoError, where, "cannot create {} {}: {}", what, path,
                ec ? ec.message() : std::string("a file of that name exists"));
}

std::string read_text_file(const std::string& path, const std::string& where) {
  const RegularFile f(path, where);
  std::string s;
  char buf[65536];
  size_t n = 0;
  while ((n = f.read_at(s.size(), buf, sizeof(buf))) > 0) s.append(buf, n);
  return s;
}

}  // namespace parallm
