// A small multilayer perceptron for smoke tests of the parallel machinery
// (`parallm test-dist`): linear layers with GELU between them, trained to
// reproduce its input (mean squared error), like the seeds' test network.
// Same conventions as the GPT: parameters and gradients in flat buffers laid
// out by a ParamLayout, explicit forward and backward, activations allocated
// once for the largest batch, and a grads_ready hook called as each layer's
// gradients become final so data parallelism can overlap communication.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/allocator.h"
#include "model/params.h"

namespace parallm::model {

class MLP {
 public:
  // dims: input width, hidden widths..., output width (at least 2 entries).
  MLP(std::vector<int64_t> dims, int64_t max_batch);

  const ParamLayout& layout() const { return layout_; }
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  int64_t flat_size() const { return layout_.total(); }
  int64_t num_params() const { return layout_.count(); }
  const std::vector<int64_t>& dims() const { return dims_; }

  // Weights ~ N(0, 1/fan_in), biases zero.
  void init_weights(uint64_t seed);
  void zero_grad();
  // x: [B, dims.front()], target: [B, dims.back()]; returns mean((y - target)^2).
  float forward(const float* x, const float* target, int64_t B);
  // Adds d(loss)/d(params) into grads(); after forward() with the same x and B.
  // grads_ready(u) is called when the gradient of layout unit u is final.
  void backward(const float* x, int64_t B, const std::function<void(int)>& grads_ready = nullptr);
  // FLOPs of one training step per sample (forward + backward of the linear layers).
  double flops_per_sample() const;

 private:
  std::vector<int64_t> dims_;
  int64_t max_B_;
  ParamLayout layout_;
  std::vector<int64_t> w_, b_;  // offsets of each layer's weight and bias
  Array<float> params_, grads_;
  // Per layer l: pre-activation z_l [B, dims[l+1]] and (hidden layers) GELU output a_l.
  std::vector<Array<float>> z_, a_;
  Array<float> dy_, dx_;  // backward temporaries, [B, max width]
  const float* target_ = nullptr;
  int64_t cur_B_ = 0;
};

}  // namespace parallm::model
