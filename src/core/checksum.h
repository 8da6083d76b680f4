// CRC-32 checksums (zlib's: the polynomial of gzip, PNG and zip) of memory
// and of files, for checkpoint integrity. A checkpoint records each file's
// checksum when it writes it and verifies it before it is loaded, so a flipped
// byte on a disk or a shared filesystem is an error naming the file, never a
// silently different model. Written as 8 lower-case hex digits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/fileio.h"

namespace parallm {

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);
uint32_t crc32_of(std::initializer_list<ConstFilePiece> pieces);
inline uint32_t crc32_of(const std::string& s) {
  return crc32_of({{s.data(), s.size()}});
}
// The whole file, read in chunks; IoError "[where] cannot read <path>: ..." on failure.
uint32_t file_crc32(const std::string& path, const std::string& where);
std::string crc32_hex(uint32_t crc);

}  // namespace parallm
