#include "model/cp_layout.h"

#include <algorithm>

#include "core/error.h"

namespace parallm::model {

const char* cp_kind_name(CpKind k) {
  return k == CpKind::Ring ? "ring" : "ulysses";
}

void check_cp_layout(CpKind kind, int C, int64_t T, int64_t n_head, int tp) {
  PARALLM_CHECK(C >= 1, ConfigError, "config", "parallel.cp={}: at least 1", C);
  if (C == 1) return;
  if (kind == CpKind::Ring) {
    PARALLM_CHECK(T % (2 * C) == 0, ConfigError, "config",
                  "model.block_size={} is not divisible by 2 x parallel.cp = {}: ring attention splits the sequence "
                  "into 2 x cp chunks (rank r holds chunks r and 2cp-1-r, so the causal work is the same on every "
                  "rank); use a block_size that is a multiple of {}",
                  T, 2 * C, 2 * C);
    return;
  }
  PARALLM_CHECK(T % C == 0, ConfigError, "config",
                "model.block_size={} is not divisible by parallel.cp={}: Ulysses gives each rank T/cp positions", T, C);
  PARALLM_CHECK(n_head % tp == 0 && (n_head / tp) % C == 0, ConfigError, "config",
                "model.n_head={} is not divisible by parallel.tp={} x parallel.cp={}: Ulysses gives each rank "
                "n_head/(tp x cp) whole heads around attention; use parallel.cp_kind=ring, or a degree that divides "
                "the heads",
                n_head, tp, C);
}

CpRuns CpLayout::runs(int64_t T) const {
  CpRuns out;
  if (size == 1) {
    out.run[out.n++] = {0, 0, T};
    return out;
  }
  if (contiguous()) {
    PARALLM_CHECK(T % size == 0, ShapeError, "cp", "T={} is not divisible by cp={}", T, size);
    const int64_t Tl = T / size;
    out.run[out.n++] = {0, rank * Tl, Tl};
    return out;
  }
  PARALLM_CHECK(T % (2 * size) == 0, ShapeError, "cp", "T={} is not divisible by 2 x cp = {}", T, 2 * size);
  const int64_t Tc = T / (2 * size);
  out.run[out.n++] = {0, rank * Tc, Tc};
  out.run[out.n++] = {Tc, (2 * size - 1 - rank) * Tc, Tc};
  return out;
}

std::pair<int, int64_t> CpLayout::owner(int64_t pos, int64_t T) const {
  for (int r = 0; r < size; ++r) {
    CpLayout other = *this;
    other.rank = r;
    for (const auto& run : other.runs(T))
      if (pos >= run.global && pos < run.global + run.len) return {r, run.local + pos - run.global};
  }
  throw ShapeError("cp", fmt::format("position {} is outside a sequence of {}", pos, T));
}

std::vector<int64_t> CpLayout::positions(int64_t T) const {
  std::vector<int64_t> p;
  for (const auto& r : runs(T))
    for (int64_t i = 0; i < r.len; ++i) p.push_back(r.global + i);
  return p;
}

namespace {
template <class F>
void for_rows(const CpLayout& l, int64_t B, int64_t T, F&& f) {
  const int64_t Tl = T / l.size;
  const auto rs = l.runs(T);
  for (int64_t b = 0; b < B; ++b)
    for (const auto& r : rs) f(b * Tl + r.local, b * T + r.global, r.len);
}
}  // namespace

void CpLayout::slice(const float* full, float* local, int64_t B, int64_t T, int64_t width) const {
  for_rows(*this, B, T,
           [&](int64_t lo, int64_t go, int64_t n) { std::copy_n(full + go * width, n * width, local + lo * width); });
}

void CpLayout::slice(const int32_t* full, int32_t* local, int64_t B, int64_t T) const {
  for_rows(*this, B, T, [&](int64_t lo, int64_t go, int64_t n) { std::copy_n(full + go, n, local + lo); });
}

void CpLayout::place(const float* local, float* full, int64_t B, int64_t T, int64_t width) const {
  for_rows(*this, B, T,
           [&](int64_t lo, int64_t go, int64_t n) { std::copy_n(local + lo * width, n * width, full + go * width); });
}

}  // namespace parallm::model
