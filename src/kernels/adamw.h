// Contract: AdamW update with torch.optim.AdamW semantics (decoupled weight
// decay applied first, bias-corrected moments, eps added after the sqrt).
// grad_scale multiplies the gradient first (global-norm clipping).
#pragma once
#include <cstdint>

namespace parallm::kernels {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based step count for bias correction
  float grad_scale = 1.0f;
};

namespace ref {
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p);
double sum_squares(const float* x, int64_t n);
}  // namespace ref
namespace cpu {
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p);
// Sum of squares, accumulated in double in a fixed blocked order (thread-count independent).
double sum_squares(const float* x, int64_t n);
}  // namespace cpu
// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p);
// Deterministic: fixed blocks summed in double in a fixed order; the result is copied to the host.
double sum_squares(const float* x, int64_t n);
}  // namespace cuda

}  // namespace parallm::kernels
