// Reader for the golden files written by tools/torch_ref/gen_golden.py:
// manifest.json (config + tensor table) and data.bin (raw little-endian tensors).
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace parallm::test {

struct Golden {
  nlohmann::json config;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::vector<float>> f32;
  std::map<std::string, std::vector<int32_t>> i32;

  explicit Golden(const std::string& dir) {
    std::ifstream mf(dir + "/manifest.json");
    if (!mf) throw std::runtime_error("cannot open " + dir + "/manifest.json");
    nlohmann::json m = nlohmann::json::parse(mf);
    config = m["config"];
    std::ifstream df(dir + "/data.bin", std::ios::binary);
    std::vector<char> data((std::istreambuf_iterator<char>(df)), std::istreambuf_iterator<char>());
    for (const auto& t : m["tensors"]) {
      std::string name = t["name"];
      std::vector<int64_t> shape = t["shape"];
      int64_t n = 1;
      for (auto d : shape) n *= d;
      size_t off = t["offset"];
      if (off + n * 4 > data.size()) throw std::runtime_error("golden tensor out of range: " + name);
      shapes[name] = shape;
      if (t["dtype"] == "f32") {
        std::vector<float> v(n);
        std::memcpy(v.data(), data.data() + off, n * 4);
        f32[name] = std::move(v);
      } else {
        std::vector<int32_t> v(n);
        std::memcpy(v.data(), data.data() + off, n * 4);
        i32[name] = std::move(v);
      }
    }
  }
};

}  // namespace parallm::test
