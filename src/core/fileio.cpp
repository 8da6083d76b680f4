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

void write_file(const std::string& path, std::initializer_list<ConstFilePiece> pieces) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  PARALLM_CHECK(fd >= 0, IoError, "io.write", "cannot create {}: {}", path, std::strerror(errno));
  for (const auto& p : pieces) {
    int e = transfer(fd, static_cast<char*>(const_cast<void*>(p.data)), p.bytes, true);
    if (e != 0) {
      ::close(fd);
      throw IoError("io.write", fmt::format("write to {} failed: {} (disk full?)", path, std::strerror(e)));
    }
  }
  // A full disk or a network filesystem may report the failure only here.
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  const int closed = ::close(fd) == 0 ? 0 : errno;
  PARALLM_CHECK(synced == 0 && closed == 0, IoError, "io.write", "write to {} failed: {} (disk full?)", path,
                std::strerror(synced ? synced : closed));
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

void read_file(const std::string& path, std::initializer_list<FilePiece> pieces) {
  size_t want = 0;
  for (const auto& p : pieces) want += p.bytes;
  int fd = ::open(path.c_str(), O_RDONLY);
  PARALLM_CHECK(fd >= 0, IoError, "io.read", "cannot read {}: {}", path, std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<size_t>(st.st_size) != want) {
    ::close(fd);
    throw IoError("io.read", fmt::format("{} has {} bytes, expected {} (truncated or another model?)", path,
                                         static_cast<size_t>(st.st_size), want));
  }
  for (const auto& p : pieces) {
    int e = transfer(fd, static_cast<char*>(p.data), p.bytes, false);
    if (e != 0) {
      ::close(fd);
      throw IoError("io.read", fmt::format("read of {} failed: {}", path, std::strerror(e)));
    }
  }
  ::close(fd);
}

void read_file_range(const std::string& path, size_t file_size, size_t offset, void* out, size_t bytes) {
  int fd = ::open(path.c_str(), O_RDONLY);
  PARALLM_CHECK(fd >= 0, IoError, "io.read", "cannot read {}: {}", path, std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<size_t>(st.st_size) != file_size || offset + bytes > file_size) {
    ::close(fd);
    throw IoError("io.read", fmt::format("{} has {} bytes, expected {} (truncated or another model?)", path,
                                         static_cast<size_t>(st.st_size), file_size));
  }
  if (::lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0) {
    ::close(fd);
    throw IoError("io.read", fmt::format("cannot seek in {}: {}", path, std::strerror(errno)));
  }
  const int e = transfer(fd, static_cast<char*>(out), bytes, false);
  ::close(fd);
  PARALLM_CHECK(e == 0, IoError, "io.read", "read of {} failed: {}", path, std::strerror(e));
}

void make_directories(const std::string& path, const std::string& where, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  PARALLM_CHECK(!ec && std::filesystem::is_directory(path), IoError, where, "cannot create {} {}: {}", what, path,
                ec ? ec.message() : std::string("a file of that name exists"));
}

std::string read_text_file(const std::string& path, const std::string& where) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  PARALLM_CHECK(f, IoError, where, "cannot read {}: {}", path, std::strerror(errno));
  std::string s;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  PARALLM_CHECK(!bad, IoError, where, "error reading {}", path);
  return s;
}

}  // namespace parallm
