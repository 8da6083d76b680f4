// Context parallelism's attention blocks on the GPU (attention.h, AttnBlock),
// fp32, plus the strided copies and fills of elementwise.h. Simple row
// kernels, written for correctness and repeatability rather than speed:
//   forward:  one thread block per query row (b, h, i); its threads score
//             kThreads visible keys at a time and keep an online softmax
//             (running max, sum and output row in shared memory), then merge
//             the block's output and log-sum-exp into the running out and lse;
//   backward: one thread block per query row adds dS K to its dq row and
//             stores D = rowsum(dout * out), then one per key row (b, h, j)
//             recomputes the scores of the query rows that see it and adds
//             dS^T Q and P'^T dO to its dk and dv rows.
// Every sum runs in a fixed order and no two blocks write the same element, so
// results are bitwise repeatable. No T x T matrix exists; the workspace holds
// D (B*NH*Tq floats).
#include <cfloat>
#include <cmath>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace parallm::kernels::cuda {

namespace {
constexpr int kThreads = 128;

// Keys visible to query rows before block-local row `end`: row i sees keys j < q0 + i + 1 - k0.
__device__ __forceinline__ int64_t keys_before(const AttnBlock& b, int64_t end) {
  const int64_t n = b.q0 + end - b.k0;
  return n < 0 ? 0 : (n > b.Tk ? b.Tk : n);
}

// AttnDropout::global_bh on the device.
__device__ __forceinline__ int64_t global_bh(const AttnDropout& d, int64_t b, int64_t h, int64_t NH) {
  return d.bh_base + b * (d.bh_stride ? d.bh_stride : NH) + h;
}

// mask / (1 - p) of query row i, key row j of the block (1 without dropout).
__device__ __forceinline__ float keep_scale(const AttnDropout& d, const AttnBlock& b, int64_t gbh, int64_t i,
                                            int64_t j) {
  if (d.p <= 0) return 1.0f;
  const uint64_t g = static_cast<uint64_t>((gbh * b.T + b.q0 + i) * b.T + b.k0 + j);
  return dropout_keep(d.p, d.seed, d.stream, g) ? 1.0f / (1.0f - d.p) : 0.0f;
}

__device__ __forceinline__ float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

// Block (b*NH + h)*Tq + i. Shared memory: q row, output accumulator (HS each), kThreads probabilities.
__global__ void forward_rows(float* out, float* lse, const float* q, const float* k, const float* v, AttnBlock blk,
                             AttnDropout drop) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  const int64_t HS = blk.HS, i = blockIdx.x % blk.Tq, bh = blockIdx.x / blk.Tq, b = bh / blk.NH, h = bh % blk.NH;
  const int tid = threadIdx.x;
  float* o = out + b * blk.o_bs + i * blk.o_ld + h * HS;
  float* l = lse + bh * blk.lse_ld + i;
  const int64_t len = keys_before(blk, i + 1);
  if (len == 0) {
    if (blk.first) {
      for (int64_t c = tid; c < HS; c += blockDim.x) o[c] = 0.0f;
      if (tid == 0) *l = -INFINITY;
    }
    return;
  }
  float* qs = sm;
  float* acc = qs + HS;
  float* ps = acc + HS;
  const float* qi = q + b * blk.q_bs + i * blk.q_ld + h * HS;
  for (int64_t c = tid; c < HS; c += blockDim.x) {
    qs[c] = qi[c];
    acc[c] = 0.0f;
  }
  __syncthreads();
  const float* kb = k + b * blk.kv_bs + h * HS;
  const float* vb = v + b * blk.kv_bs + h * HS;
  const float scale = rsqrtf(static_cast<float>(HS));
  const int64_t gbh = global_bh(drop, b, h, blk.NH);
  float m = -INFINITY, sum = 0.0f;
  for (int64_t j0 = 0; j0 < len; j0 += blockDim.x) {
    const int64_t j = j0 + tid;
    const float s = j < len ? dot(qs, kb + j * blk.kv_ld, HS) * scale : -INFINITY;
    const float mn = fmaxf(m, block_max(s, red));  // finite: key j0 is visible
    const float p = j < len ? expf(s - mn) : 0.0f;
    const float corr = expf(m - mn);
    sum = sum * corr + block_sum(p, red);
    ps[tid] = j < len ? p * keep_scale(drop, blk, gbh, i, j) : 0.0f;
    __syncthreads();
    const int64_t cnt = len - j0 < blockDim.x ? len - j0 : blockDim.x;
    for (int64_t c = tid; c < HS; c += blockDim.x) {
      float a = acc[c] * corr;
      for (int64_t t = 0; t < cnt; ++t) a += ps[t] * vb[(j0 + t) * blk.kv_ld + c];
      acc[c] = a;
    }
    __syncthreads();
    m = mn;
  }
  const float lb = m + logf(sum);
  const float la = blk.first ? -INFINITY : *l;
  float wa = 0.0f, wb = 1.0f / sum, ln = lb;  // the block's values alone
  if (la != -INFINITY) {
    ln = fmaxf(la, lb) + log1pf(expf(-fabsf(la - lb)));
    wa = expf(la - ln);
    wb = expf(lb - ln) / sum;
  }
  for (int64_t c = tid; c < HS; c += blockDim.x) o[c] = la == -INFINITY ? acc[c] * wb : wa * o[c] + wb * acc[c];
  __syncthreads();  // every thread has read *l
  if (tid == 0) *l = ln;
}

// dS of query row i against key row j (s: the scaled score, dpp: dout_i . v_j).
__device__ __forceinline__ float dscore(float s, float lse, float dpp, float mask, float D, float scale, float* pm) {
  const float p = expf(s - lse);
  *pm = p * mask;
  return p * (dpp * mask - D) * scale;
}

// Block (b*NH + h)*Tq + i: dq row += dS K; Dw[(b*NH + h)*Tq + i] = D. Shared: q, dout rows, dq accumulator, kThreads
// dS.
__global__ void backward_query_rows(float* dq, float* Dw, const float* dout, const float* q, const float* k,
                                    const float* v, const float* out, const float* lse, AttnBlock blk,
                                    AttnDropout drop) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  const int64_t HS = blk.HS, i = blockIdx.x % blk.Tq, bh = blockIdx.x / blk.Tq, b = bh / blk.NH, h = bh % blk.NH;
  const int tid = threadIdx.x;
  const int64_t len = keys_before(blk, i + 1);
  if (len == 0) return;
  float* qs = sm;
  float* dys = qs + HS;
  float* acc = dys + HS;
  float* gs = acc + HS;
  const float* qi = q + b * blk.q_bs + i * blk.q_ld + h * HS;
  const float* dyi = dout + b * blk.o_bs + i * blk.o_ld + h * HS;
  const float* oi = out + b * blk.o_bs + i * blk.o_ld + h * HS;
  float d = 0.0f;
  for (int64_t c = tid; c < HS; c += blockDim.x) {
    qs[c] = qi[c];
    dys[c] = dyi[c];
    acc[c] = 0.0f;
    d += dyi[c] * oi[c];
  }
  const float D = block_sum(d, red);  // also orders the shared stores above before their reads
  if (tid == 0) Dw[blockIdx.x] = D;
  const float* kb = k + b * blk.kv_bs + h * HS;
  const float* vb = v + b * blk.kv_bs + h * HS;
  const float scale = rsqrtf(static_cast<float>(HS)), l = lse[bh * blk.lse_ld + i];
  const int64_t gbh = global_bh(drop, b, h, blk.NH);
  for (int64_t j0 = 0; j0 < len; j0 += blockDim.x) {
    const int64_t j = j0 + tid;
    float g = 0.0f, pm = 0.0f;
    if (j < len)
      g = dscore(dot(qs, kb + j * blk.kv_ld, HS) * scale, l, dot(dys, vb + j * blk.kv_ld, HS),
                 keep_scale(drop, blk, gbh, i, j), D, scale, &pm);
    gs[tid] = g;
    __syncthreads();
    const int64_t cnt = len - j0 < blockDim.x ? len - j0 : blockDim.x;
    for (int64_t c = tid; c < HS; c += blockDim.x) {
      float a = acc[c];
      for (int64_t t = 0; t < cnt; ++t) a += gs[t] * kb[(j0 + t) * blk.kv_ld + c];
      acc[c] = a;
    }
    __syncthreads();
  }
  float* dqi = dq + b * blk.q_bs + i * blk.q_ld + h * HS;
  for (int64_t c = tid; c < HS; c += blockDim.x) dqi[c] += acc[c];
}

// Block (b*NH + h)*Tk + j: dk row += dS^T Q, dv row += P'^T dO over the query rows that see key j.
// Shared: k, v rows, dk and dv accumulators, kThreads dS and P'.
__global__ void backward_key_rows(float* dk, float* dv, const float* Dw, const float* dout, const float* q,
                                  const float* k, const float* v, const float* lse, AttnBlock blk, AttnDropout drop) {
  extern __shared__ float sm[];
  const int64_t HS = blk.HS, j = blockIdx.x % blk.Tk, bh = blockIdx.x / blk.Tk, b = bh / blk.NH, h = bh % blk.NH;
  const int tid = threadIdx.x;
  int64_t i_first = blk.k0 + j - blk.q0;  // the first query row that sees key j
  if (i_first < 0) i_first = 0;
  if (i_first >= blk.Tq) return;
  float* ks = sm;
  float* vs = ks + HS;
  float* ak = vs + HS;
  float* av = ak + HS;
  float* gs = av + HS;
  float* pms = gs + blockDim.x;
  const float* kj = k + b * blk.kv_bs + j * blk.kv_ld + h * HS;
  const float* vj = v + b * blk.kv_bs + j * blk.kv_ld + h * HS;
  for (int64_t c = tid; c < HS; c += blockDim.x) {
    ks[c] = kj[c];
    vs[c] = vj[c];
    ak[c] = av[c] = 0.0f;
  }
  __syncthreads();
  const float* qb = q + b * blk.q_bs + h * HS;
  const float* dyb = dout + b * blk.o_bs + h * HS;
  const float scale = rsqrtf(static_cast<float>(HS));
  const int64_t gbh = global_bh(drop, b, h, blk.NH);
  for (int64_t i0 = i_first; i0 < blk.Tq; i0 += blockDim.x) {
    const int64_t i = i0 + tid;
    float g = 0.0f, pm = 0.0f;
    if (i < blk.Tq)
      g = dscore(dot(ks, qb + i * blk.q_ld, HS) * scale, lse[bh * blk.lse_ld + i], dot(vs, dyb + i * blk.o_ld, HS),
                 keep_scale(drop, blk, gbh, i, j), Dw[bh * blk.Tq + i], scale, &pm);
    gs[tid] = g;
    pms[tid] = pm;
    __syncthreads();
    const int64_t cnt = blk.Tq - i0 < blockDim.x ? blk.Tq - i0 : blockDim.x;
    for (int64_t c = tid; c < HS; c += blockDim.x) {
      float a = ak[c], e = av[c];
      for (int64_t t = 0; t < cnt; ++t) {
        a += gs[t] * qb[(i0 + t) * blk.q_ld + c];
        e += pms[t] * dyb[(i0 + t) * blk.o_ld + c];
      }
      ak[c] = a;
      av[c] = e;
    }
    __syncthreads();
  }
  float* dkj = dk + b * blk.kv_bs + j * blk.kv_ld + h * HS;
  float* dvj = dv + b * blk.kv_bs + j * blk.kv_ld + h * HS;
  for (int64_t c = tid; c < HS; c += blockDim.x) {
    dkj[c] += ak[c];
    dvj[c] += av[c];
  }
}

// The shared checks, and this backend's launch limits.
void check(const AttnBlock& b, const char* where) {
  check_attn_block(b, where);
  PARALLM_CHECK(b.B * b.NH * (b.Tq > b.Tk ? b.Tq : b.Tk) < (int64_t{1} << 31), ShapeError, where,
                "{} rows exceed one launch", b.B * b.NH * (b.Tq > b.Tk ? b.Tq : b.Tk));
  PARALLM_CHECK(b.HS <= 1024, ShapeError, where, "head size {} over 1024", b.HS);
}

// Whether some query row of the block sees some key.
bool any_visible(const AttnBlock& b) {
  return b.Tq > 0 && b.Tk > 0 && b.k0 < b.q0 + b.Tq;
}

template <class E>
__global__ void fill_kernel(E* x, int64_t n, float value) {
  const E e = from_f<E>(value);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = e;
}

template <class E>
void copy_rows_impl(E* dst, int64_t dld, const E* src, int64_t sld, int64_t width, int64_t rows) {
  if (width <= 0 || rows <= 0) return;
  PARALLM_CUDA_CHECK(cudaMemcpy2DAsync(dst, dld * sizeof(E), src, sld * sizeof(E), width * sizeof(E), rows,
                                       cudaMemcpyDeviceToDevice, stream()),
                     "kernels.cuda.copy_rows");
}

template <class E>
void fill_impl(E* x, int64_t n, float value) {
  if (n <= 0) return;
  fill_kernel<<<capped_blocks(n, 256), 256, 0, stream()>>>(x, n, value);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.fill");
}
}  // namespace

int64_t attention_block_workspace_floats(int64_t B, int64_t NH, int64_t Tq, int64_t, int64_t, int) {
  return B * NH * Tq;
}

void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttnBlock& blk, AttnDropout drop, float*) {
  check(blk, "kernels.cuda.attention_block_forward");
  if (blk.B * blk.NH * blk.Tq == 0 || (!blk.first && !any_visible(blk))) return;
  const size_t shared = (2 * blk.HS + kThreads) * sizeof(float);
  forward_rows<<<static_cast<unsigned>(blk.B * blk.NH * blk.Tq), kThreads, shared, stream()>>>(out, lse, q, k, v, blk,
                                                                                               drop);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.attention_block_forward");
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const AttnBlock& blk,
                              AttnDropout drop, float* workspace) {
  check(blk, "kernels.cuda.attention_block_backward");
  if (blk.B * blk.NH == 0 || !any_visible(blk)) return;
  const size_t shared_q = (3 * blk.HS + kThreads) * sizeof(float);
  backward_query_rows<<<static_cast<unsigned>(blk.B * blk.NH * blk.Tq), kThreads, shared_q, stream()>>>(
      dq, workspace, dout, q, k, v, out, lse, blk, drop);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.attention_block_backward");
  const size_t shared_k = (4 * blk.HS + 2 * kThreads) * sizeof(float);
  backward_key_rows<<<static_cast<unsigned>(blk.B * blk.NH * blk.Tk), kThreads, shared_k, stream()>>>(
      dk, dv, workspace, dout, q, k, v, lse, blk, drop);
  PARALLM_CUDA_LAUNCHED("kernels.cuda.attention_block_backward");
}

void copy_rows(float* dst, int64_t dld, const float* src, int64_t sld, int64_t width, int64_t rows) {
  copy_rows_impl(dst, dld, src, sld, width, rows);
}
void copy_rows(bfloat16* dst, int64_t dld, const bfloat16* src, int64_t sld, int64_t width, int64_t rows) {
  copy_rows_impl(dst, dld, src, sld, width, rows);
}
void fill(float* x, int64_t n, float value) {
  fill_impl(x, n, value);
}
void fill(bfloat16* x, int64_t n, float value) {
  fill_impl(x, n, value);
}

}  // namespace parallm::kernels::cuda
