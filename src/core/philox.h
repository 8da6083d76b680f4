// Philox4x32-10, the counter-based generator behind core/rng.h, written once
// for the host and for CUDA device code (nvcc sees __host__ __device__), so a
// dropout mask drawn on the GPU is the CPU's mask bit for bit.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define PARALLM_HD __host__ __device__
#else
#define PARALLM_HD
#endif

namespace parallm {

// The four 32-bit outputs for (seed, stream, index) into out[0..3].
PARALLM_HD inline void philox4x32_into(uint32_t out[4], uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(M0) * c0;
    uint64_t p1 = static_cast<uint64_t>(M1) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += W0;
    k1 += W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Uniform in [0, 1) with 24 bits of resolution.
PARALLM_HD inline float u32_to_unit(uint32_t u) {
  return static_cast<float>(u >> 8) * (1.0f / 16777216.0f);
}

// Dropout's keep decision for element g: lane g % 4 of Philox block g / 4 (CPU and GPU).
PARALLM_HD inline bool dropout_keep_at(float p, uint64_t seed, uint64_t stream, uint64_t g) {
  uint32_t r[4];
  philox4x32_into(r, seed, stream, g / 4);
  return u32_to_unit(r[g % 4]) >= p;
}

}  // namespace parallm
