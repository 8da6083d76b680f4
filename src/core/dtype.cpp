#include "core/dtype.h"

#include <algorithm>

#include "core/device.h"
#include "core/error.h"

namespace parallm {

DType parse_dtype(const std::string& s) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "fp32" || l == "float32" || l == "float" || l == "f32") return DType::F32;
  if (l == "bf16" || l == "bfloat16") return DType::BF16;
  if (l == "int32" || l == "i32") return DType::I32;
  if (l == "uint16" || l == "u16") return DType::U16;
  throw ConfigError("dtype", fmt::format("unknown dtype \"{}\" (expected fp32, bf16, int32 or uint16)", s));
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s.rfind("cuda", 0) == 0) {
    Device d{DeviceType::CUDA, 0};
    if (s.size() > 4) {
      PARALLM_CHECK(s[4] == ':' && s.size() > 5, ConfigError, "device", "bad device \"{}\"", s);
      try {
        d.index = std::stoi(s.substr(5));
      } catch (...) {
        throw ConfigError("device", fmt::format("bad device index in \"{}\"", s));
      }
    }
    return d;
  }
  throw ConfigError("device", fmt::format("unknown device \"{}\" (expected cpu or cuda[:N])", s));
}

}  // namespace parallm
