// What both families' Hugging Face readers share (hf_gpt2.cpp, hf_llama.cpp):
// a JSON object file, a shape as text, the finiteness check of read weights.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fileio.h"

namespace parallm::hf {

inline nlohmann::json read_json_object(const std::string& path) {
  const auto j = nlohmann::json::parse(read_text_file(path, "hf"), nullptr, false);
  PARALLM_CHECK(j.is_object(), IoError, "hf", "{} is not a JSON object", path);
  return j;
}

inline std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// IoError naming the file, the tensor and the element unless v[0, n) are all finite.
inline void check_finite(const float* v, int64_t n, const std::string& file, const std::string& tensor) {
  const float* bad = std::find_if(v, v + n, [](float x) { return !std::isfinite(x); });
  PARALLM_CHECK(bad == v + n, IoError, "hf",
                "{}: tensor \"{}\" holds {} at element {} (of {}): weights must be finite; the file is damaged, or "
                "was saved from a model that had diverged",
                file, tensor, *bad, bad - v, n);
}

}  // namespace parallm::hf
