#include "core/rng.h"

#include <cmath>

namespace parallm {

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
  std::array<uint32_t, 4> r;
  philox4x32_into(r.data(), seed, stream, index);
  return r;
}

uint64_t stream_id(uint32_t kind, uint64_t a, uint64_t b, uint64_t c) {
  // splitmix64-style mixing of the components into one 64-bit stream id.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(kind + 0x9E3779B97F4A7C15ull);
  h = mix(h ^ (a + 0x9E3779B97F4A7C15ull));
  h = mix(h ^ (b + 0x632BE59BD9B4E019ull));
  h = mix(h ^ (c + 0x85EBCA77C2B2AE63ull));
  return h;
}

void fill_normal(float* out, int64_t n, float mean, float std, uint64_t seed, uint64_t stream) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < (n + 1) / 2; ++j) {
    auto r = philox4x32(seed, stream, static_cast<uint64_t>(j));
    // Box-Muller on two 32-bit uniforms; u1 in (0, 1] so log is finite.
    double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967296.0;
    double u2 = static_cast<double>(r[1]) / 4294967296.0;
    double rad = std::sqrt(-2.0 * std::log(u1));
    double z0 = rad * std::cos(2.0 * M_PI * u2), z1 = rad * std::sin(2.0 * M_PI * u2);
    out[2 * j] = static_cast<float>(mean + std * z0);
    if (2 * j + 1 < n) out[2 * j + 1] = static_cast<float>(mean + std * z1);
  }
}

void fill_uniform(float* out, int64_t n, float lo, float hi, uint64_t seed, uint64_t stream) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < (n + 3) / 4; ++j) {
    auto r = philox4x32(seed, stream, static_cast<uint64_t>(j));
    for (int k = 0; k < 4 && 4 * j + k < n; ++k) out[4 * j + k] = lo + (hi - lo) * u32_to_unit(r[k]);
  }
}

uint64_t random_below(uint64_t n, uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = philox4x32(seed, stream, index);
  uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
  return x % n;
}

}  // namespace parallm
