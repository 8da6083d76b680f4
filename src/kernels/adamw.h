// Contract: AdamW update with torch.optim.AdamW semantics (decoupled weight
// decay applied first, bias-corrected moments, eps added after the sqrt).
// grad_scale multiplies the gradient first (global-norm clipping).
// param_bf16, where given, receives each updated weight rounded to bf16 (to
// nearest even, as the model's conversions round) in the same pass: the
// mixed-precision models' weight copy, kept current without a pass of its own.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace parallm::kernels {

// AdamW's five hyperparameters, declared once for the program: the kernels
// read them in AdamWParams, the optimizer is configured with them
// (optim::AdamWConfig is this type). The defaults are `parallm train`'s
// (the optimizer.* keys of train/config/config.h).
struct AdamWHyperparams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// One update's parameters: the hyperparameters, then the step.
struct AdamWParams : AdamWHyperparams {
  int64_t step = 1;  // 1-based step count for bias correction
  float grad_scale = 1.0f;
};

// Several runs of one set of flat buffers in one call (one launch on the GPU
// for up to 40 runs; model::UpdateRun is this type): run r updates param[r.param ..], grad[r.grad ..],
// m and v [r.state ..] and param_bf16 [r.param ..] for r.length elements,
// with p.weight_decay where r.decay and none elsewhere.
struct AdamWRun {
  int64_t param = 0, grad = 0, state = 0, length = 0;
  bool decay = false;
};

// adamw_runs by one adamw_step call per run (the CPU implementations).
template <class Step>
void adamw_each_run(Step step, float* param, const float* grad, float* m, float* v, const AdamWRun* runs, int64_t nruns,
                    const AdamWParams& p, bfloat16* param_bf16) {
  AdamWParams q = p;
  for (int64_t i = 0; i < nruns; ++i) {
    const AdamWRun& r = runs[i];
    q.weight_decay = r.decay ? p.weight_decay : 0.0f;
    step(param + r.param, grad + r.grad, m + r.state, v + r.state, r.length, q,
         param_bf16 ? param_bf16 + r.param : nullptr);
  }
}

namespace ref {
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                bfloat16* param_bf16 = nullptr);
void adamw_runs(float* param, const float* grad, float* m, float* v, const AdamWRun* runs, int64_t nruns,
                const AdamWParams& p, bfloat16* param_bf16 = nullptr);
double sum_squares(const float* x, int64_t n);
}  // namespace ref
namespace cpu {
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                bfloat16* param_bf16 = nullptr);
void adamw_runs(float* param, const float* grad, float* m, float* v, const AdamWRun* runs, int64_t nruns,
                const AdamWParams& p, bfloat16* param_bf16 = nullptr);
// Sum of squares, accumulated in double in a fixed blocked order (thread-count independent).
double sum_squares(const float* x, int64_t n);
}  // namespace cpu
// kernels::cuda: the same contract on device pointers, run on gpu::stream().
namespace cuda {
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                bfloat16* param_bf16 = nullptr);
void adamw_runs(float* param, const float* grad, float* m, float* v, const AdamWRun* runs, int64_t nruns,
                const AdamWParams& p, bfloat16* param_bf16 = nullptr);
// Deterministic: fixed blocks summed in double in a fixed order; the result is copied to the host.
double sum_squares(const float* x, int64_t n);
// out[i] (host) = sum_squares(base + offset[i], count[i]) for i < n: the same kernels queued run after run, one
// readback at the end.
void sum_squares_runs(const float* base, const int64_t* offset, const int64_t* count, int64_t n, double* out);
}  // namespace cuda

}  // namespace parallm::kernels
