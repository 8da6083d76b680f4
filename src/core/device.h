// Where a tensor's bytes live. Only the CPU is implemented in this layer; the
// CUDA backend plugs in behind the same value type.
#pragma once
#include <string>

namespace parallm {

enum class DeviceType { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  std::string str() const { return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index); }
};

// "cpu", "cuda", "cuda:1"; throws ConfigError otherwise.
Device parse_device(const std::string& s);

}  // namespace parallm
