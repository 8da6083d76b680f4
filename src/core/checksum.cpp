#include "core/checksum.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace parallm {

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

uint32_t crc32_of(std::initializer_list<ConstFilePiece> pieces) {
  uint32_t crc = 0;
  for (const auto& p : pieces) crc = crc32_update(crc, p.data, p.bytes);
  return crc;
}

uint32_t file_crc32(const std::string& path, const std::string& where) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  PARALLM_CHECK(fd >= 0, IoError, where, "cannot read {}: {}", path, std::strerror(errno));
  std::vector<char> buf(size_t{1} << 20);
  uint32_t crc = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw IoError(where, fmt::format("cannot read {}: {}", path, std::strerror(e)));
    }
    if (n == 0) break;
    crc = crc32_update(crc, buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return crc;
}

std::string crc32_hex(uint32_t crc) {
  return fmt::format("{:08x}", crc);
}

}  // namespace parallm
