// AdamW and the global-norm reduction on the GPU. The update follows the CPU
// contract (decoupled decay first, bias-corrected moments, eps after the
// sqrt); every run of a call goes in one launch (adamw_step is one run), and
// the bf16 weight copy is written beside the weights where asked. sum_squares is deterministic: a fixed grid of blocks
// each sums a fixed set of elements in double, then one block adds the partials in order.
#include <cmath>

#include "core/allocator.h"
#include "kernels/adamw.h"
#include "kernels/cuda/common.cuh"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kPartials = 1024;  // blocks of the first pass: fixed, so the order of additions is too

struct AdamWArgs {
  float lr, beta1, beta2, eps, decay, grad_scale, inv_bc1, inv_sqrt_bc2;
};

__device__ __forceinline__ void adamw_one(float& w, float g, float& m, float& v, const AdamWArgs& a) {
  g *= a.grad_scale;
  const float wd = w * (1.0f - a.lr * a.decay);
  m = a.beta1 * m + (1.0f - a.beta1) * g;
  v = a.beta2 * v + (1.0f - a.beta2) * g * g;
  w = wd - a.lr * a.inv_bc1 * m / (sqrtf(v) * a.inv_sqrt_bc2 + a.eps);
}

__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  return uint32_t{__bfloat16_as_ushort(__float2bfloat16_rn(lo))} |
         (uint32_t{__bfloat16_as_ushort(__float2bfloat16_rn(hi))} << 16);
}

// Several runs in one launch: the runs travel in the kernel's parameters;
// block b works on elements [kPerBlock * (b - first), + kPerBlock) of the run
// whose blocks start at first. Each element goes through adamw_one, whichever path.
constexpr int kMaxRuns = 40;
constexpr int kPerBlock = kThreads * 4 * 8;  // 8 float4 per thread
struct RunTable {
  struct Run {
    int64_t param, grad, state, length;
    int first_block;
    float decay;
    bool vec;
  } r[kMaxRuns];
  int n;
};

__global__ void adamw_runs_kernel(float* param, const float* grad, float* m, float* v, bfloat16* lp, RunTable t,
                                  AdamWArgs a) {
  int i = 0;
  while (i + 1 < t.n && t.r[i + 1].first_block <= static_cast<int>(blockIdx.x)) ++i;
  const auto& r = t.r[i];
  a.decay = r.decay;
  const int64_t lo = int64_t{static_cast<int>(blockIdx.x) - r.first_block} * kPerBlock;
  const int64_t hi = lo + kPerBlock < r.length ? lo + kPerBlock : r.length;
  float *w = param + r.param, *mm = m + r.state, *vv = v + r.state;
  const float* g = grad + r.grad;
  bfloat16* c = lp ? lp + r.param : nullptr;
  if (r.vec) {  // lo and hi - (hi % 4) are multiples of 4
    for (int64_t j = lo / 4 + threadIdx.x; j < hi / 4; j += kThreads) {
      float4 wi = reinterpret_cast<float4*>(w)[j], mi = reinterpret_cast<float4*>(mm)[j],
             vi = reinterpret_cast<float4*>(vv)[j];
      const float4 gi = reinterpret_cast<const float4*>(g)[j];
      adamw_one(wi.x, gi.x, mi.x, vi.x, a);
      adamw_one(wi.y, gi.y, mi.y, vi.y, a);
      adamw_one(wi.z, gi.z, mi.z, vi.z, a);
      adamw_one(wi.w, gi.w, mi.w, vi.w, a);
      reinterpret_cast<float4*>(w)[j] = wi;
      reinterpret_cast<float4*>(mm)[j] = mi;
      reinterpret_cast<float4*>(vv)[j] = vi;
      if (c) reinterpret_cast<uint2*>(c)[j] = make_uint2(bf16x2(wi.x, wi.y), bf16x2(wi.z, wi.w));
    }
    for (int64_t j = hi / 4 * 4 + threadIdx.x; j < hi; j += kThreads) {
      adamw_one(w[j], g[j], mm[j], vv[j], a);
      if (c) c[j] = from_f<bfloat16>(w[j]);
    }
  } else {
    for (int64_t j = lo + threadIdx.x; j < hi; j += kThreads) {
      adamw_one(w[j], g[j], mm[j], vv[j], a);
      if (c) c[j] = from_f<bfloat16>(w[j]);
    }
  }
}

__global__ void sumsq_partial(double* partial, const float* x, int64_t n) {
  __shared__ double sh[32];
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    s += static_cast<double>(x[i]) * x[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sumsq_final(double* out, const double* partial, int n) {
  __shared__ double sh[32];
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *out = s;
}
__global__ void fill_double(double* out) {
  *out = 0.0;
}
}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                bfloat16* param_bf16) {
  const AdamWRun run{0, 0, 0, n, true};  // decay: p.weight_decay as given
  adamw_runs(param, grad, m, v, &run, 1, p, param_bf16);
}

void adamw_runs(float* param, const float* grad, float* m, float* v, const AdamWRun* runs, int64_t nruns,
                const AdamWParams& p, bfloat16* param_bf16) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const AdamWArgs a{p.lr,
                    p.beta1,
                    p.beta2,
                    p.eps,
                    0.0f,  // per run
                    p.grad_scale,
                    static_cast<float>(1.0 / bc1),
                    static_cast<float>(1.0 / std::sqrt(bc2))};
  for (int64_t i0 = 0; i0 < nruns; i0 += kMaxRuns) {
    RunTable t{};
    int blocks = 0;
    const int64_t i1 = nruns - i0 < kMaxRuns ? nruns : i0 + kMaxRuns;
    for (int64_t i = i0; i < i1; ++i) {
      const AdamWRun& r = runs[i];
      if (r.length <= 0) continue;
      const bool vec = aligned16(param + r.param, grad + r.grad, m + r.state, v + r.state) &&
                       (!param_bf16 || reinterpret_cast<uintptr_t>(param_bf16 + r.param) % 8 == 0);
      t.r[t.n++] = {r.param, r.grad, r.state, r.length, blocks, r.decay ? p.weight_decay : 0.0f, vec};
      const int64_t nb = (r.length + kPerBlock - 1) / kPerBlock;
      PARALLM_CHECK(blocks + nb < (int64_t{1} << 30), ShapeError, "kernels.cuda.adamw_runs",
                    "{} elements in one launch exceed its grid", r.length);
      blocks += static_cast<int>(nb);
    }
    if (t.n == 0) continue;
    adamw_runs_kernel<<<blocks, kThreads, 0, stream()>>>(param, grad, m, v, param_bf16, t, a);
    PARALLM_CUDA_LAUNCHED("kernels.cuda.adamw_runs");
  }
}

void sum_squares_runs(const float* base, const int64_t* offset, const int64_t* count, int64_t n, double* out) {
  if (n <= 0) return;
  // One scratch for every run: the runs' kernels run one after another on the stream, each into its own result.
  gpu::DeviceBuffer buf((kPartials + static_cast<size_t>(n)) * sizeof(double), MemCategory::Scratch);
  double* partial = buf.as<double>();
  double* result = partial + kPartials;
  for (int64_t i = 0; i < n; ++i) {
    if (count[i] <= 0) {
      fill_double<<<1, 1, 0, stream()>>>(result + i);
    } else {
      sumsq_partial<<<kPartials, kThreads, 0, stream()>>>(partial, base + offset[i], count[i]);
      sumsq_final<<<1, 1024, 0, stream()>>>(result + i, partial, kPartials);
    }
    PARALLM_CUDA_LAUNCHED("kernels.cuda.sum_squares_runs");
  }
  gpu::memcpy_d2h(out, result, static_cast<size_t>(n) * sizeof(double));
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  gpu::DeviceBuffer buf((kPartials + 1) * sizeof(double), MemCategory::Scratch);
  double* partial = buf.as<double>();
  sumsq_partial<<<kPartials, kThreads, 0, stream()>>>(partial, x, n);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.sum_squares");
  sumsq_final<<<1, 1024, 0, stream()>>>(partial + kPartials, partial, kPartials);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.sum_squares");
  double r = 0;
  gpu::memcpy_d2h(&r, partial + kPartials, sizeof(double));
  return r;
}

}  // namespace parallm::kernels::cuda
