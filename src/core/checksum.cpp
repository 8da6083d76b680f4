#include "core/checksum.h"

#include <zlib.h>

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
  const RegularFile f(path, where);  // a FIFO or a directory is refused by name
  std::vector<char> buf(size_t{1} << 20);
  uint32_t crc = 0;
  for (size_t at = 0, n; (n = f.read_at(at, buf.data(), buf.size())) > 0; at += n)
    crc = crc32_update(crc, buf.data(), n);
  return crc;
}

std::string crc32_hex(uint32_t crc) {
  return fmt::format("{:08x}", crc);
}

}  // namespace parallm
