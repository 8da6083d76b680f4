#include "model/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/gelu.h"
#include "kernels/ops.h"

namespace parallm::model {

MLP::MLP(std::vector<int64_t> dims, int64_t max_batch) : dims_(std::move(dims)), max_B_(max_batch) {
  PARALLM_CHECK(dims_.size() >= 2, ConfigError, "model.mlp", "needs at least an input and an output width, got {}",
                dims_.size());
  for (int64_t d : dims_) PARALLM_CHECK(d > 0, ConfigError, "model.mlp", "layer widths must be positive, got {}", d);
  PARALLM_CHECK(max_batch > 0, ConfigError, "model.mlp", "batch must be positive, got {}", max_batch);
  const size_t L = dims_.size() - 1;
  int64_t widest = 0;
  for (size_t l = 0; l < L; ++l) {
    const int64_t in = dims_[l], out = dims_[l + 1];
    const float std = 1.0f / std::sqrt(static_cast<float>(in));
    w_.push_back(layout_.add(fmt::format("layers.{}.weight", l), {out, in}, ParamSlot::Init::Normal, std, true));
    b_.push_back(layout_.add(fmt::format("layers.{}.bias", l), {out}, ParamSlot::Init::Zeros, 0.0f, false));
    z_.emplace_back(static_cast<size_t>(max_batch * out), MemCategory::Activations);
    if (l + 1 < L) a_.emplace_back(static_cast<size_t>(max_batch * out), MemCategory::Activations);
    widest = std::max({widest, in, out});
  }
  params_ = Array<float>(layout_.total(), MemCategory::Params);
  grads_ = Array<float>(layout_.total(), MemCategory::Grads);
  dy_ = Array<float>(max_batch * widest, MemCategory::Activations);
  dx_ = Array<float>(max_batch * widest, MemCategory::Activations);
  std::fill(params_.begin(), params_.end(), 0.0f);
  zero_grad();
}

void MLP::init_weights(uint64_t seed) {
  layout_.init(params_.data(), seed);
}

void MLP::zero_grad() {
  std::memset(grads_.data(), 0, grads_.size() * sizeof(float));
}

float MLP::forward(const float* x, const float* target, int64_t B) {
  PARALLM_CHECK(B > 0 && B <= max_B_, ShapeError, "model.mlp.forward", "batch {} outside 1..{}", B, max_B_);
  const kernels::Ops& k = kernels::ops_for(Device::cpu());
  const size_t L = dims_.size() - 1;
  const float* in = x;
  for (size_t l = 0; l < L; ++l) {
    const int64_t n_in = dims_[l], n_out = dims_[l + 1];
    k.matmul_forward(z_[l].data(), in, params() + w_[l], params() + b_[l], B, n_in, n_out);
    if (l + 1 < L) {
      k.gelu_forward(a_[l].data(), z_[l].data(), B * n_out, kernels::GeluKind::Tanh);
      in = a_[l].data();
    }
  }
  const float* y = z_[L - 1].data();
  const int64_t n = B * dims_.back();
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(y[i]) - target[i];
    sum += d * d;
  }
  target_ = target;
  cur_B_ = B;
  return static_cast<float>(sum / static_cast<double>(n));
}

void MLP::backward(const float* x, int64_t B, const std::function<void(int)>& grads_ready) {
  PARALLM_CHECK(B == cur_B_ && target_, InternalError, "model.mlp.backward",
                "backward with batch {} after forward with batch {}", B, cur_B_);
  const kernels::Ops& k = kernels::ops_for(Device::cpu());
  const int L = static_cast<int>(dims_.size()) - 1;
  const int64_t n = B * dims_.back();
  const float* y = z_[L - 1].data();
  float* dy = dy_.data();
  const float scale = 2.0f / static_cast<float>(n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dy[i] = scale * (y[i] - target_[i]);
  for (int l = L - 1; l >= 0; --l) {
    const int64_t n_in = dims_[l], n_out = dims_[l + 1];
    const float* in = l == 0 ? x : a_[l - 1].data();
    k.matmul_backward(l > 0 ? dx_.data() : nullptr, grads() + w_[l], grads() + b_[l], dy, in, params() + w_[l], B, n_in,
                      n_out);
    if (grads_ready) {
      grads_ready(2 * l);  // units follow the layout: weight then bias of each layer
      grads_ready(2 * l + 1);
    }
    if (l > 0) k.gelu_backward(dy, z_[l - 1].data(), dx_.data(), B * n_in, kernels::GeluKind::Tanh);
  }
}

double MLP::flops_per_sample() const {
  double f = 0;
  for (size_t l = 0; l + 1 < dims_.size(); ++l) f += 6.0 * static_cast<double>(dims_[l] * dims_[l + 1]);
  return f;
}

}  // namespace parallm::model
