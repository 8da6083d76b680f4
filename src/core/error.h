// Typed errors with context. Library code throws these; only cli/ decides to
// exit. Every message starts with the operation in brackets, e.g.
//   [config] model.n_layer: expected a positive integer, got "abc"
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace parallm {

class Error : public std::runtime_error {
 public:
  Error(const std::string& where, const std::string& what)
      : std::runtime_error("[" + where + "] " + what), where_(where), message_(what) {}
  const std::string& where() const { return where_; }
  const std::string& message() const { return message_; }  // without the [where] prefix

 private:
  std::string where_, message_;
};

// Bad user input: a config key, a CLI argument, a file that is not what it claims.
class ConfigError : public Error {
  using Error::Error;
};
// Shapes, sizes or dtypes that do not fit an operation.
class ShapeError : public Error {
  using Error::Error;
};
// Files and directories.
class IoError : public Error {
  using Error::Error;
};
// Communication between ranks (timeouts, lost peers, mismatches).
class CommError : public Error {
  using Error::Error;
};
// Numerical trouble during training (NaN/Inf loss).
class NumericError : public Error {
  using Error::Error;
};
// CUDA runtime, driver and library failures (cuBLAS, NCCL), and asking for
// the GPU in a build without CUDA.
class CudaError : public Error {
  using Error::Error;
};

// A broken invariant inside parallm: a bug.
class InternalError : public Error {
  using Error::Error;
};

#define PARALLM_CHECK(cond, ErrType, where, ...)                   \
  do {                                                             \
    if (!(cond)) throw ErrType((where), fmt::format(__VA_ARGS__)); \
  } while (0)

// Config validation: `key` must hold a positive integer.
inline void require_positive(int64_t value, const char* key) {
  PARALLM_CHECK(value > 0, ConfigError, "config", "{} must be a positive integer, got {}", key, value);
}

}  // namespace parallm
