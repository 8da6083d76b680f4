// FP8 products (train.dtype=fp8): the context the model gives the linear
// layers' products. The CPU emulates them (cpu/fp8.h): each operand's rows are
// scaled by a power of two from their absolute maximum, rounded to E4M3
// (activations, weights) or E5M2 (output gradients) and multiplied in fp32.
// A row is one token's features or one output channel's weights, so a split
// of the tokens (data, context, pipeline micro-batches, sequence parallelism)
// never changes a scale; where tensor parallelism splits a row over its ranks,
// the model hands the products that row maximum's reduction (`split_in` for
// rows split along the product's inner dimension: a row-parallel layer's input
// and weight; `split_out` for d(output) rows split along the outputs: a
// column-parallel layer's). Outside an Fp8Scope that is on (the head, the first
// and last blocks by policy) the products are bf16 (rounded, emulated).
//
// Tensorwise (train.fp8_scaling=tensorwise): each operand has one scale, from
// its absolute maximum over the whole logical tensor: the model hands the
// products a reduction over every rank holding a part of it (the ranks of its
// pipeline stage: data, context, tensor and expert parallel), so every layout
// scales alike, and the row reductions are not used. A micro-batch's tokens
// are the same over any split of the batch (data/loader.cpp's sample order),
// so its global maximum is too.
#pragma once
#include <cstdint>

namespace parallm::kernels {

// The two FP8 formats: E4M3 (activations, weights), E5M2 (output gradients).
enum class Fp8Format { E4M3, E5M2 };

// In place over a group: a[i] = the maximum of every rank's a[i], i < n. Empty: nothing to reduce.
struct Fp8RowMax {
  void (*fn)(void* ctx, float* a, int64_t n) = nullptr;
  void* ctx = nullptr;
  void operator()(float* a, int64_t n) const {
    if (fn) fn(ctx, a, n);
  }
};

// Tensorwise scaling where `on`, the maximum reduced by `reduce` (empty: this rank holds the whole tensor).
struct Fp8Tensorwise {
  bool on = false;
  Fp8RowMax reduce;
};

struct Fp8Context {
  bool on = false;
  Fp8RowMax split_in, split_out;
  Fp8Tensorwise tensorwise;
};

// This thread's context (the model's thread calls the products).
Fp8Context& fp8_context();

// FP8 products on (or off) until the scope ends; the row reductions are cleared inside it, the tensorwise
// choice kept.
class Fp8Scope {
 public:
  explicit Fp8Scope(bool on) : saved_(fp8_context()) { fp8_context() = Fp8Context{on, {}, {}, saved_.tensorwise}; }
  ~Fp8Scope() { fp8_context() = saved_; }
  Fp8Scope(const Fp8Scope&) = delete;
  Fp8Scope& operator=(const Fp8Scope&) = delete;

 private:
  Fp8Context saved_;
};

// Tensorwise scaling for the products until the scope ends (the training passes: evaluation and sampling,
// which ranks run apart, scale per row).
class Fp8TensorwiseScope {
 public:
  explicit Fp8TensorwiseScope(Fp8Tensorwise tw) : saved_(fp8_context().tensorwise) { fp8_context().tensorwise = tw; }
  ~Fp8TensorwiseScope() { fp8_context().tensorwise = saved_; }
  Fp8TensorwiseScope(const Fp8TensorwiseScope&) = delete;
  Fp8TensorwiseScope& operator=(const Fp8TensorwiseScope&) = delete;

 private:
  Fp8Tensorwise saved_;
};

// The row maxima's reductions of one layer's products, until the scope ends.
class Fp8SplitScope {
 public:
  Fp8SplitScope(Fp8RowMax in, Fp8RowMax out) : saved_(fp8_context()) {
    fp8_context().split_in = in;
    fp8_context().split_out = out;
  }
  ~Fp8SplitScope() { fp8_context() = saved_; }
  Fp8SplitScope(const Fp8SplitScope&) = delete;
  Fp8SplitScope& operator=(const Fp8SplitScope&) = delete;

 private:
  Fp8Context saved_;
};

}  // namespace parallm::kernels
