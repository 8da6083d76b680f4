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
#include "kernels/cpu/f16.h"
#include "kernels/cpu/gemm_bf16.h"
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

// bf16 products: x and wte are converted once per call (wte read from the
// parameters' bf16 copy where one is installed), each chunk's
// d(logits) once for both gradient products; softmax and losses stay fp32.
void classifier_logits_bf16p(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  PARALLM_PROFILE("classifier_logits");
  const bfloat16* xb = bf16_operand(0, x, N * C);
  const bfloat16* wb = bf16_operand(1, wte, V * C);
  gemm_bf16(false, true, N, V, C, xb, wb, 0.0f, logits, V);
}

void classifier_forward_backward_bf16p(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                       const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss,
                                       float* ws) {
  PARALLM_PROFILE("classifier_forward_backward");
  const int64_t R = chunk_rows(N, V);
  const bool grad = dx != nullptr;
  const bfloat16* xb = bf16_operand(0, x, N * C);
  const bfloat16* wb = bf16_operand(1, wte, V * C);
  bfloat16* db = grad ? bf16_scratch(2, std::min(R, N) * V) : nullptr;
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    gemm_bf16(false, true, rows, V, C, xb + r0 * C, wb, 0.0f, ws, V);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) losses[r0 + r] = xent_row(ws + r * V, V, targets[r0 + r], grad, dloss);
    if (grad) {
      {
        PARALLM_PROFILE("to_bf16");
        to_bf16(db, ws, rows, V, V);
      }
      gemm_bf16(false, false, rows, C, V, db, wb, 0.0f, dx + r0 * C, C);
      gemm_bf16(true, false, V, C, rows, db, xb + r0 * C, 1.0f, dwte, C);
    }
  }
}

// fp16 products (emulated, f16.h): x and wte rounded once per call, each chunk's d(logits) once for both
// gradient products; softmax and losses stay fp32.
void classifier_logits_f16p(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  PARALLM_PROFILE("classifier_logits");
  sgemm(false, true, N, V, C, 1.0f, f16_operand(0, x, N * C), C, f16_operand(1, wte, V * C), C, 0.0f, logits, V);
}

void classifier_forward_backward_f16p(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                      const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss, float* ws) {
  PARALLM_PROFILE("classifier_forward_backward");
  const int64_t R = chunk_rows(N, V);
  const bool grad = dx != nullptr;
  const float* xh = f16_operand(0, x, N * C);
  const float* wh = f16_operand(1, wte, V * C);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    sgemm(false, true, rows, V, C, 1.0f, xh + r0 * C, C, wh, C, 0.0f, ws, V);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) losses[r0 + r] = xent_row(ws + r * V, V, targets[r0 + r], grad, dloss);
    if (grad) {
      round_to_f16(ws, ws, rows * V);  // d(logits), in place: the workspace is not read again
      sgemm(false, false, rows, C, V, 1.0f, ws, V, wh, C, 0.0f, dx + r0 * C, C);
      sgemm(true, false, V, C, rows, 1.0f, ws, V, xh + r0 * C, C, 1.0f, dwte, C);
    }
  }
}

}  // namespace parallm::kernels::cpu
