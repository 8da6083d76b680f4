// bf16 products through oneDNN's matmul primitive (see gemm_bf16.h). One
// primitive per (shape, layout, beta, threads), created on first use and
// cached under a mutex; operands are bound per call, so the cache holds no
// pointers. Sampling runs a new row count per token, so the cache is capped:
// past kMaxCached primitives it is emptied (one costs 0.3-12 ms to create).
// A runtime row count would avoid that but costs half the speed (oneDNN 2.6
// then leaves AMX brgemm for gemm:jit: 199 vs 406 GFLOP/s at 16384x1152x384).
#include "kernels/cpu/gemm_bf16.h"

#include <omp.h>

#include <array>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>

#include "core/allocator.h"
#include "core/error.h"
#include "core/profiler.h"
#include "kernels/cpu/simd.h"

namespace parallm::kernels::cpu {

namespace {
using dt = dnnl::memory::data_type;

struct Engine {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
};
Engine& engine() {
  static Engine e;
  return e;
}

// M N K ta tb accumulate ldc threads (a primitive keeps its thread count)
using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, int64_t, int>;
constexpr size_t kMaxCached = 512;
struct Cached {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

dnnl::memory::desc operand(int64_t rows, int64_t cols, bool trans, dt type) {
  // Logical [rows, cols]; stored dense as given, or as the transpose [cols, rows].
  return dnnl::memory::desc({rows, cols}, type, trans ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1});
}

Cached make(const Key& k) {
  const auto [M, N, K, ta, tb, acc, ldc, threads] = k;
  (void)threads;  // oneDNN reads the thread count itself; it is in the key only
  Cached c;
  c.a = operand(M, K, ta, dt::bf16);
  c.b = operand(K, N, tb, dt::bf16);
  c.c = dnnl::memory::desc({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (acc) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  c.prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(c.a, c.b, c.c), attr, engine().eng));
  return c;
}

// A copy (primitives are shared handles), so emptying the cache cannot pull
// one from under a caller.
Cached cached(const Key& k) {
  (void)engine();  // constructed before the cache, so destroyed after it
  static std::mutex mu;
  static std::map<Key, Cached> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(k);
  if (it == cache.end()) {
    if (cache.size() >= kMaxCached) cache.clear();
    it = cache.emplace(k, make(k)).first;
  }
  return it->second;
}

PARALLM_CLONES void to_bf16_run(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// The scratch slots. The allocator is reached before the slots exist, so it
// outlives them at exit.
struct Scratch {
  Scratch() { (void)HostAllocator::instance(); }
  std::array<Array<bfloat16>, 4> slot;
};
}  // namespace

void to_bf16(bfloat16* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  if (ld == cols) {  // one flat run, cut into blocks of 64 KiB of output
    const int64_t n = rows * cols, blk = 32768;
#pragma omp parallel for schedule(static) if (n > 2 * blk)
    for (int64_t i = 0; i < n; i += blk) to_bf16_run(d + i, src + i, std::min(blk, n - i));
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) to_bf16_run(d + r * cols, src + r * ld, cols);
}

void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  bfloat16* a = bf16_scratch(0, M * K);
  bfloat16* b = bf16_scratch(1, K * N);
  {
    PARALLM_PROFILE("to_bf16");
    to_bf16(a, A, trans_a ? K : M, trans_a ? M : K, lda);
    to_bf16(b, B, trans_b ? N : K, trans_b ? K : N, ldb);
  }
  gemm_bf16(trans_a, trans_b, M, N, K, a, b, beta, C, ldc);
}

const bfloat16* bf16_operand(int slot, const float* src, int64_t n) {
  if (const bfloat16* c = Bf16CopyScope::find(src, n)) return c;
  bfloat16* d = bf16_scratch(slot, n);
  PARALLM_PROFILE("to_bf16");
  to_bf16(d, src, 1, n, n);
  return d;
}

bfloat16* bf16_scratch(int slot, int64_t n) {
  static Scratch s;
  PARALLM_CHECK(slot >= 0 && slot < static_cast<int>(s.slot.size()), InternalError, "kernels.bf16_scratch",
                "slot {} out of range", slot);
  Array<bfloat16>& a = s.slot[static_cast<size_t>(slot)];
  if (static_cast<int64_t>(a.size()) < n) a = Array<bfloat16>(static_cast<size_t>(n), MemCategory::Scratch);
  return a.data();
}

}  // namespace parallm::kernels::cpu

// The contract of kernels/bf16.h (its conversion is in ops.cpp, with the
// other choices between the devices).
namespace parallm::kernels {

using namespace cpu;  // the primitive cache and the engine above

bool bf16_products_supported() {
  // oneDNN also offers bf16 on plain AVX-512 by emulation ("gemm:jit",
  // "brg:avx512_core"), slower than fp32: only AMX or AVX-512 BF16 count.
  static const bool ok = [] {
    const std::string impl = bf16_products_impl();
    return impl.find("amx") != std::string::npos || impl.find("bf16") != std::string::npos;
  }();
  return ok;
}

std::string bf16_products_impl() {
  try {
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(operand(64, 64, false, dt::bf16), operand(64, 64, true, dt::bf16),
                           dnnl::memory::desc({64, 64}, dt::f32, dnnl::memory::dims{64, 1})),
        engine().eng);
    return pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bfloat16* A, const bfloat16* B,
               float beta, float* C, int64_t ldc) {
  PARALLM_CHECK(beta == 0.0f || beta == 1.0f, InternalError, "kernels.gemm_bf16", "beta must be 0 or 1, got {}", beta);
  PARALLM_CHECK(!omp_in_parallel(), InternalError, "kernels.gemm_bf16", "called inside an OpenMP parallel region");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  try {
    const Cached c = cached(Key{M, N, K, trans_a, trans_b, beta == 1.0f, ldc, omp_get_max_threads()});
    Engine& e = engine();
    dnnl::memory am(c.a, e.eng, const_cast<bfloat16*>(A)), bm(c.b, e.eng, const_cast<bfloat16*>(B)), cm(c.c, e.eng, C);
    c.prim.execute(e.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    e.strm.wait();
  } catch (const dnnl::error& err) {
    throw InternalError("kernels.gemm_bf16",
                        fmt::format("oneDNN matmul failed ({}) for M={} N={} K={}", err.what(), M, N, K));
  }
}

namespace {
thread_local const Bf16CopyScope* innermost_scope = nullptr;
}

Bf16CopyScope::Bf16CopyScope(const float* base, const bfloat16* copy, int64_t n)
    : base_(base), copy_(copy), n_(n), outer_(innermost_scope) {
  innermost_scope = this;
}
Bf16CopyScope::~Bf16CopyScope() {
  innermost_scope = outer_;
}

const bfloat16* Bf16CopyScope::find(const float* src, int64_t n) {
  const auto p = reinterpret_cast<uintptr_t>(src);
  for (const Bf16CopyScope* s = innermost_scope; s; s = s->outer_) {
    const auto b = reinterpret_cast<uintptr_t>(s->base_);
    if (p < b || (p - b) % sizeof(float) != 0) continue;
    const auto off = static_cast<int64_t>((p - b) / sizeof(float));  // in floats
    if (off < s->n_ && off + n <= s->n_) return s->copy_ + off;
  }
  return nullptr;
}

}  // namespace parallm::kernels
