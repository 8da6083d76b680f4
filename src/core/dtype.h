// Element types of tensors. bf16 is stored as raw uint16 bits; conversion
// rounds to nearest even.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace parallm {

enum class DType : uint8_t { F32, BF16, I32, U16 };

// A bf16 value as stored in bf16 buffers (mixed precision on the GPU): the
// raw bits, with no arithmetic; kernels convert to float and back.
struct bfloat16 {
  uint16_t bits;
};

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::I32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::U16:
      return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "fp32";
    case DType::BF16:
      return "bf16";
    case DType::I32:
      return "int32";
    case DType::U16:
      return "uint16";
  }
  return "?";
}

// Parses every usual spelling (fp32/float32, bf16/bfloat16, int32, uint16);
// throws ConfigError naming the value otherwise.
DType parse_dtype(const std::string& s);

// Branch-free (a select, not a branch), so loops over it vectorize.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;  // NaN stays NaN
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace parallm
