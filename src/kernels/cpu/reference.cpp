// Reference kernels: the simplest correct loops, accumulating in double where
// it is cheap to do so. They are the oracle the optimized kernels are tested
// against; nothing on the training path calls them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace parallm::kernels {

bool dropout_keep(float p, uint64_t seed, uint64_t stream, uint64_t index) {
  return dropout_keep_at(p, seed, stream, index);
}

namespace ref {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OUT; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (int64_t i = 0; i < IN; ++i) acc += static_cast<double>(inp[n * IN + i]) * weight[o * IN + i];
      out[n * OUT + o] = static_cast<float>(acc);
    }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  if (dinp)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < IN; ++i) {
        double acc = 0;
        for (int64_t o = 0; o < OUT; ++o) acc += static_cast<double>(dout[n * OUT + o]) * weight[o * IN + i];
        dinp[n * IN + i] = static_cast<float>(acc);
      }
  for (int64_t o = 0; o < OUT; ++o) {
    for (int64_t i = 0; dweight && i < IN; ++i) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) acc += static_cast<double>(dout[n * OUT + o]) * inp[n * IN + i];
      dweight[o * IN + i] += static_cast<float>(acc);
    }
    if (dbias) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) acc += dout[n * OUT + o];
      dbias[o] += static_cast<float>(acc);
    }
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= C;
    double rs = 1.0 / std::sqrt(v + kLayerNormEps);
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = static_cast<float>((x[c] - m) * rs * weight[c] + (bias ? bias[c] : 0.0f));
    mean[n] = static_cast<float>(m);
    rstd[n] = static_cast<float>(rs);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    double dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (x[c] - mean[n]) * rstd[n];
      double dnorm = static_cast<double>(dy[c]) * weight[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * xhat;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (x[c] - mean[n]) * rstd[n];
      double dnorm = static_cast<double>(dy[c]) * weight[c];
      dinp[n * C + c] += static_cast<float>((dnorm - dnorm_mean - xhat * dnorm_norm_mean) * rstd[n]);
      dweight[c] += static_cast<float>(dy[c] * xhat);
      if (dbias) dbias[c] += dy[c];
    }
  }
}

static double gelu_ref(double x, GeluKind k) {
  if (k == GeluKind::Exact) return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
static double gelu_grad_ref(double x, GeluKind k) {
  if (k == GeluKind::Exact)
    return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  const double s = std::sqrt(2.0 / M_PI);
  double u = s * (x + 0.044715 * x * x * x), th = std::tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

void gelu_forward(float* out, const float* inp, int64_t n, GeluKind kind) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(gelu_ref(inp[i], kind));
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluKind kind) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = static_cast<float>(gelu_grad_ref(inp[i], kind) * dout[i]);
}

// Materializes the full probability matrix per (b, h): fine for an oracle.
int64_t attention_workspace_floats(int64_t, int64_t T, int64_t, int64_t, int) {
  return 3 * T * T;
}

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       AttnDropout drop, float* ws) {
  const int64_t HS = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* q = qkv + (b * T + i) * 3 * C + h * HS;
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = qkv + (b * T + j) * 3 * C + C + h * HS;
          double d = 0;
          for (int64_t e = 0; e < HS; ++e) d += static_cast<double>(q[e]) * k[e];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
        lse[(b * NH + h) * T + i] = static_cast<float>(mx + std::log(sum));
        for (int64_t e = 0; e < HS; ++e) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) {
            double p = std::exp(s[j] - mx) / sum;
            if (drop.p > 0)
              p = dropout_keep(drop.p, drop.seed, drop.stream, (drop.global_bh(b, h, NH) * T + i) * T + j)
                      ? p / (1.0 - drop.p)
                      : 0;
            acc += p * qkv[(b * T + j) * 3 * C + 2 * C + h * HS + e];
          }
          out[(b * T + i) * C + h * HS + e] = static_cast<float>(acc);
        }
      }
  (void)ws;
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B,
                        int64_t T, int64_t C, int64_t NH, AttnDropout drop, float* ws) {
  const int64_t HS = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::fill(dqkv, dqkv + B * T * 3 * C, 0.0f);
  (void)out;
  (void)ws;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* q = qkv + (b * T + i) * 3 * C + h * HS;
        const float* dy = dout + (b * T + i) * C + h * HS;
        std::vector<double> p(i + 1), dp(i + 1);
        double D = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = qkv + (b * T + j) * 3 * C + C + h * HS;
          const float* v = qkv + (b * T + j) * 3 * C + 2 * C + h * HS;
          double d = 0, g = 0;
          for (int64_t e = 0; e < HS; ++e) {
            d += static_cast<double>(q[e]) * k[e];
            g += static_cast<double>(dy[e]) * v[e];
          }
          p[j] = std::exp(d * scale - lse[(b * NH + h) * T + i]);
          double mask = 1.0;
          if (drop.p > 0)
            mask = dropout_keep(drop.p, drop.seed, drop.stream, (drop.global_bh(b, h, NH) * T + i) * T + j)
                       ? 1.0 / (1.0 - drop.p)
                       : 0.0;
          dp[j] = g * mask;
          D += p[j] * dp[j];
          for (int64_t e = 0; e < HS; ++e)
            dqkv[(b * T + j) * 3 * C + 2 * C + h * HS + e] += static_cast<float>(p[j] * mask * dy[e]);
        }
        for (int64_t j = 0; j <= i; ++j) {
          double ds = p[j] * (dp[j] - D) * scale;
          const float* k = qkv + (b * T + j) * 3 * C + C + h * HS;
          for (int64_t e = 0; e < HS; ++e) {
            dqkv[(b * T + i) * 3 * C + h * HS + e] += static_cast<float>(ds * k[e]);
            dqkv[(b * T + j) * 3 * C + C + h * HS + e] += static_cast<float>(ds * q[e]);
          }
        }
      }
}

int64_t classifier_workspace_floats(int64_t N, int64_t V, int) {
  return N * V;
}

void classifier_logits(float* logits, const float* x, const float* wte, int64_t N, int64_t C, int64_t V) {
  matmul_forward(logits, x, wte, nullptr, N, C, V);
}

void classifier_forward_backward(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                 const int32_t* targets, int64_t N, int64_t C, int64_t V, float dloss, float* ws) {
  float* logits = ws;
  classifier_logits(logits, x, wte, N, C, V);
  for (int64_t n = 0; n < N; ++n) {
    float* l = logits + n * V;
    double mx = *std::max_element(l, l + V), sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(l[v] - mx);
    losses[n] = static_cast<float>(mx + std::log(sum) - l[targets[n]]);
    for (int64_t v = 0; v < V; ++v)
      l[v] = static_cast<float>((std::exp(l[v] - mx) / sum - (v == targets[n] ? 1.0 : 0.0)) * dloss);
  }
  if (dx) matmul_backward(dx, dwte, nullptr, logits, x, wte, N, C, V);
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                       int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        out[(b * T + t) * C + c] = wte[tokens[b * T + t] * C + c] + (wpe ? wpe[t * C + c] : 0.0f);
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                        int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        dwte[tokens[b * T + t] * C + c] += dout[(b * T + t) * C + c];
        if (dwpe) dwpe[t * C + c] += dout[(b * T + t) * C + c];
      }
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
void add_inplace(float* acc, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}
void scale_inplace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void bias_forward(float* out, const float* bias, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) out[i * C + c] += bias[c];
}
void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t stream, uint64_t base) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = dropout_keep(p, seed, stream, base + i) ? inp[i] * (1.0f / (1.0f - p)) : 0.0f;
}
void dropout_backward(float* dinp, const float* dout, int64_t n, float p, uint64_t seed, uint64_t stream,
                      uint64_t base) {
  for (int64_t i = 0; i < n; ++i)
    dinp[i] = dropout_keep(p, seed, stream, base + i) ? dout[i] * (1.0f / (1.0f - p)) : 0.0f;
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                bfloat16* param_bf16) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  for (int64_t i = 0; i < n; ++i) {
    double g = static_cast<double>(grad[i]) * p.grad_scale;
    double w = param[i] * (1.0 - static_cast<double>(p.lr) * p.weight_decay);
    m[i] = static_cast<float>(p.beta1 * m[i] + (1.0 - p.beta1) * g);
    v[i] = static_cast<float>(p.beta2 * v[i] + (1.0 - p.beta2) * g * g);
    double denom = std::sqrt(static_cast<double>(v[i])) / std::sqrt(bc2) + p.eps;
    param[i] = static_cast<float>(w - p.lr / bc1 * m[i] / denom);
    if (param_bf16) param_bf16[i].bits = f32_to_bf16(param[i]);
  }
}

void adamw_runs(float* param, const float* grad, float* m, float* v, const AdamWRun* runs, int64_t nruns,
                const AdamWParams& p, bfloat16* param_bf16) {
  adamw_each_run(&adamw_step, param, grad, m, v, runs, nruns, p, param_bf16);
}

double sum_squares(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace ref
}  // namespace parallm::kernels
