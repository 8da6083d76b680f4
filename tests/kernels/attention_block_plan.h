// Shared pieces of the attention block tests (test_attention_block.cpp and
// the CUDA one): ways of cutting T positions into chunks, the order in which
// each query chunk visits the key chunks, and a driver that runs a whole plan
// through block kernels given as function pointers (the cpu and cuda ones
// share a signature; the driver only offsets pointers, so they may be device
// pointers).
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/attention.h"

namespace parallm::test {

struct Chunk {
  int64_t start = 0, len = 0;
};

// Chunks of the given sizes, back to back from position 0.
inline std::vector<Chunk> cut(const std::vector<int64_t>& sizes) {
  std::vector<Chunk> c;
  int64_t at = 0;
  for (int64_t s : sizes) {
    c.push_back({at, s});
    at += s;
  }
  return c;
}

// One query chunk and the key chunks it meets, in order (the first is computed with `first`).
struct Visit {
  Chunk q;
  std::vector<Chunk> keys;
};
using Plan = std::vector<Visit>;

// Zigzag over `ranks` ranks: T in 2*ranks equal chunks, rank r holds chunks r
// and 2*ranks-1-r. Ring step s brings rank r the keys of rank (r - s) mod
// ranks; at step 0 a query chunk meets its own chunk (the diagonal) first.
inline Plan zigzag_plan(int64_t T, int64_t ranks) {
  const int64_t n = 2 * ranks, len = T / n;
  auto chunk = [&](int64_t c) { return Chunk{c * len, len}; };
  Plan plan;
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t qc : {r, n - 1 - r}) {
      Visit v{chunk(qc), {}};
      for (int64_t s = 0; s < ranks; ++s) {
        const int64_t src = (r - s + ranks) % ranks;
        const int64_t a = src, b = n - 1 - src;
        if (s == 0 && qc == b) {
          v.keys.push_back(chunk(b));
          v.keys.push_back(chunk(a));
        } else {
          v.keys.push_back(chunk(a));
          v.keys.push_back(chunk(b));
        }
      }
      plan.push_back(v);
    }
  return plan;
}

// Every query chunk of `qcut` against every key chunk of `kcut`, the key
// chunks in the order of `korder` (indices into kcut).
inline Plan all_pairs_plan(const std::vector<Chunk>& qcut, const std::vector<Chunk>& kcut,
                           const std::vector<int64_t>& korder) {
  Plan plan;
  for (const Chunk& q : qcut) {
    Visit v{q, {}};
    for (int64_t i : korder) v.keys.push_back(kcut[i]);
    plan.push_back(v);
  }
  return plan;
}

inline std::vector<int64_t> iota_order(size_t n, bool reversed = false) {
  std::vector<int64_t> o(n);
  std::iota(o.begin(), o.end(), int64_t{0});
  if (reversed) std::reverse(o.begin(), o.end());
  return o;
}

// Where the tensors of one problem live. q/dq rows of q_ld floats, k, v, dk, dv rows of kv_ld,
// out, dout rows of o_ld; samples of T rows; lse [B, NH, T].
struct BlockTensors {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  float *out = nullptr, *lse = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr, *ws = nullptr;
  int64_t q_ld = 0, kv_ld = 0, o_ld = 0;
};

inline kernels::AttnBlock block_of(int64_t B, int64_t NH, int64_t HS, int64_t T, const BlockTensors& t, Chunk q,
                                   Chunk k, bool first) {
  kernels::AttnBlock b;
  b.B = B, b.NH = NH, b.HS = HS;
  b.Tq = q.len, b.Tk = k.len, b.q0 = q.start, b.k0 = k.start, b.T = T;
  b.q_ld = t.q_ld, b.q_bs = T * t.q_ld;
  b.kv_ld = t.kv_ld, b.kv_bs = T * t.kv_ld;
  b.o_ld = t.o_ld, b.o_bs = T * t.o_ld;
  b.lse_ld = T;
  b.first = first;
  return b;
}

using BlockFwd = decltype(&kernels::cpu::attention_block_forward);
using BlockBwd = decltype(&kernels::cpu::attention_block_backward);

// Forward over the plan: each query chunk's blocks in the plan's order, the first with `first`.
inline void plan_forward(const Plan& plan, int64_t B, int64_t NH, int64_t HS, int64_t T, const BlockTensors& t,
                         kernels::AttnDropout drop, BlockFwd fwd) {
  for (const Visit& v : plan)
    for (size_t i = 0; i < v.keys.size(); ++i) {
      const Chunk q = v.q, k = v.keys[i];
      fwd(t.out + q.start * t.o_ld, t.lse + q.start, t.q + q.start * t.q_ld, t.k + k.start * t.kv_ld,
          t.v + k.start * t.kv_ld, block_of(B, NH, HS, T, t, q, k, i == 0), drop, t.ws);
    }
}

// Backward over the plan (dq, dk, dv accumulate), given the merged out and lse.
inline void plan_backward(const Plan& plan, int64_t B, int64_t NH, int64_t HS, int64_t T, const BlockTensors& t,
                          kernels::AttnDropout drop, BlockBwd bwd) {
  for (const Visit& v : plan)
    for (const Chunk& k : v.keys) {
      const Chunk q = v.q;
      bwd(t.dq + q.start * t.q_ld, t.dk + k.start * t.kv_ld, t.dv + k.start * t.kv_ld, t.dout + q.start * t.o_ld,
          t.q + q.start * t.q_ld, t.k + k.start * t.kv_ld, t.v + k.start * t.kv_ld, t.out + q.start * t.o_ld,
          t.lse + q.start, block_of(B, NH, HS, T, t, q, k, false), drop, t.ws);
    }
}

}  // namespace parallm::test
