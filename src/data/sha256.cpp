#include "data/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/fileio.h"

namespace parallm::data {

namespace {

// Feeds `read(buf, n)` (returns bytes read, 0 at the end) through SHA-256.
template <class Read>
std::string digest(Read read) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  PARALLM_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, InternalError, "data.sha256",
                "cannot start a SHA-256 digest (OpenSSL)");
  std::vector<char> buf(1 << 20);
  for (size_t n; (n = read(buf.data(), buf.size())) > 0;) EVP_DigestUpdate(ctx.get(), buf.data(), n);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  size_t at = 0;
  return digest([&](char* buf, size_t cap) {
    const size_t n = std::min(cap, bytes.size() - at);
    std::copy_n(bytes.data() + at, n, buf);
    at += n;
    return n;
  });
}

std::string sha256_file(const std::string& path) {
  RegularFile f(path, "data.sha256");
  size_t at = 0;
  return digest([&](char* buf, size_t cap) {
    const size_t n = f.read_at(at, buf, cap);
    at += n;
    return n;
  });
}

}  // namespace parallm::data
