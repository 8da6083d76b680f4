// Optimized LM head + softmax + cross-entropy, fused and chunked: for each
// chunk of rows, logits come from one GEMM, each row turns into its loss and
// d(logits) in place (in parallel), and two GEMMs fold the chunk into dx and
// dwte. The chunk is sized so its logits fit the workspace (at most 16M floats),
// so a 50k vocabulary never needs the full [N, V] logits. The _bf16p variants
// (train.dtype=bf16 on the CPU) run the three products on bf16 operands.
#include "kernels/classifier.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"
#include "kernels/cpu/products.h"
#include "kernels/cpu/simd.h"
#include "kernels/matmul.h"

namespace parallm::kernels::cpu {

namespace {
int64_t chunk_rows(int64_t N, int64_t V) {
  const int64_t budget = int64_t{16} << 20;
  return std::max<int64_t>(1, std::min(N, std::max<int64_t>(64, budget / std::max<int64_t>(V, 1))));
}

// Row of logits -> loss; if grad, the row becomes dloss * (softmax - onehot).
PARALLM_CLONES float xent_row(float* l, int64_t V, int32_t target, bool grad, float dloss) {
  const simd::ExpBounds eb;
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t v = 0; v < V; ++v) mx = l[v] > mx ? l[v] : mx;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t v = 0; v < V; ++v) sum += simd::fast_expf(l[v] - mx, eb);
  float lse = mx + std::log(sum);
  float loss = lse - l[target];
  if (grad) {
    for (int64_t v = 0; v < V; ++v) l[v] = simd::fast_expf(l[v] - lse, eb) * dloss;
    l[target] -= dloss;
  }
  return loss;
}
}  // namespace

int64_t classifier_workspace_floats(int64_t N, int64_t V, int) {
  return chunk_rows(N, V) * V;
}

void classifier_logits(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  PARALLM_PROFILE("classifier_logits");
  sgemm(false, true, N, V, C, 1.0f, x, C, wte, C, 0.0f, logits, V);
}

void classifier_forward_backward(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                 const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss, float* ws) {
  PARALLM_PROFILE("classifier_forward_backward");
  const int64_t R = chunk_rows(N, V);
  const bool grad = dx != nullptr;
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    sgemm(false, true, rows, V, C, 1.0f, x + r0 * C, C, wte, C, 0.0f, ws, V);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) losses[r0 + r] = xent_row(ws + r * V, V, targets[r0 + r], grad, dloss);
    if (grad) {
      sgemm(false, false, rows, C, V, 1.0f, ws, V, wte, C, 0.0f, dx + r0 * C, C);
      sgemm(true, false, V, C, rows, 1.0f, ws, V, x + r0 * C, C, 1.0f, dwte, C);
    }
  }
}

// Low-precision products (products.h: bf16, or fp16 emulated): x and wte
// rounded once per call (bf16: wte read from the parameters' copy where one is
// installed), each chunk's d(logits) once for both gradient products; softmax
// and losses stay fp32.
template <class P>
void classifier_logits_lowp(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  PARALLM_PROFILE("classifier_logits");
  P::gemm(false, true, N, V, C, P::operand(0, x, N * C), P::operand(1, wte, V * C), 0.0f, logits, V);
}

template <class P>
void classifier_forward_backward_lowp(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                      const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss, float* ws) {
  PARALLM_PROFILE("classifier_forward_backward");
  const int64_t R = chunk_rows(N, V);
  const bool grad = dx != nullptr;
  const auto* xl = P::operand(0, x, N * C);
  const auto* wl = P::operand(1, wte, V * C);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    P::gemm(false, true, rows, V, C, xl + r0 * C, wl, 0.0f, ws, V);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) losses[r0 + r] = xent_row(ws + r * V, V, targets[r0 + r], grad, dloss);
    if (grad) {
      const auto* dl = P::rounded(ws, rows, V);
      P::gemm(false, false, rows, C, V, dl, wl, 0.0f, dx + r0 * C, C);
      P::gemm(true, false, V, C, rows, dl, xl + r0 * C, 1.0f, dwte, C);
    }
  }
}

void classifier_logits_bf16p(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  classifier_logits_lowp<Bf16Products>(logits, x, wte, N, C, V);
}
void classifier_forward_backward_bf16p(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                       const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                       float* ws) {
  classifier_forward_backward_lowp<Bf16Products>(losses, dx, dwte, x, wte, targets, N, C, V, dloss, ws);
}
void classifier_logits_f16p(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  classifier_logits_lowp<F16Products>(logits, x, wte, N, C, V);
}
void classifier_forward_backward_f16p(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                      const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss, float* ws) {
  classifier_forward_backward_lowp<F16Products>(losses, dx, dwte, x, wte, targets, N, C, V, dloss, ws);
}
// The FP8 policy's head: bf16-rounded products.
void classifier_logits_bf16r(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  classifier_logits_lowp<Bf16RoundedProducts>(logits, x, wte, N, C, V);
}
void classifier_forward_backward_bf16r(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                       const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                       float* ws) {
  classifier_forward_backward_lowp<Bf16RoundedProducts>(losses, dx, dwte, x, wte, targets, N, C, V, dloss, ws);
}

}  // namespace parallm::kernels::cpu
