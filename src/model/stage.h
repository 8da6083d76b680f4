// How a model is built for its place in the run: which flat buffers it
// allocates itself (GPTStorage), which pipeline stage it holds and how many
// micro-batches each of its chunks keeps in flight (PipelinePart), and which
// part of a chunk's backward pass a call runs (BackwardPart).
#pragma once
#include <vector>

#include "core/dtype.h"
#include "model/params.h"

namespace parallm::model {

// Which flat buffers the model allocates itself. A sharded run (ZeRO stage 2
// drops the gradients, stage 3 the parameters too) gives the model a
// ParamStore instead; params()/grads() are then null.
// `compute` is the type of activations and of the weights the kernels read:
// fp32, or bf16 (mixed precision). On the GPU the model then also keeps a bf16
// copy of the fp32 parameters, refreshed on the next forward after
// params_changed(); gradients stay fp32 and accumulate across micro-steps. On
// the CPU bf16 keeps every buffer fp32 and rounds only the operands of the
// products (AMX through oneDNN); the weight operands come from a bf16 copy of
// the parameters redrawn the same way (where the model holds them).
struct GPTStorage {
  bool params = true;
  bool grads = true;
  DType compute = DType::F32;
  bool f16_products = false;    // fp32 compute: fp16 products (train.dtype=fp16; emulated on the CPU; kernels/ops.h)
  bool fp8_products = false;    // FP8 products (train.dtype=fp8; kernels/fp8.h): fp32 compute, or on a GPU bf16 ...
  bool fp8_bf16_ends = true;    // ... but bf16 in the first and last blocks (the head's are bf16 always)
  bool fp8_tensorwise = false;  // ... scaled per tensor over its ranks (train.fp8_scaling; the plan's reduction)
};

// The CPU's products with fp32 activations: fp32, bf16 (AMX), or emulated fp16 or FP8 (FP8 with the first and
// last blocks bf16: Fp8Ends). fp8_block: whether block l of n runs FP8 products.
enum class CpuProducts { Fp32, Bf16, F16, Fp8, Fp8Ends };
inline bool fp8_block(CpuProducts p, int64_t l, int64_t n) {
  return p == CpuProducts::Fp8 || (p == CpuProducts::Fp8Ends && l > 0 && l + 1 < n);
}

// A pipeline stage's model (pipeline parallelism): which chunks of layers
// this rank holds (the layout's StageSpec), how many micro-batches each chunk
// keeps activations for at once (the schedule's in-flight count: an
// activation set per micro-batch, sized at construction), and whether the
// backward pass is run as two halves, input gradients (B) then weight
// gradients (W), as zero-bubble schedules do: B then keeps the gradients of
// every linear layer's output until W.
struct PipelinePart {
  StageSpec stage;              // empty: the whole model
  std::vector<int> in_flight;   // per chunk; empty: one set each
  bool split_backward = false;  // keep what W needs after B
  bool pipelined() const { return !stage.chunks.empty(); }
};

// Which part of a chunk's backward pass to run.
enum class BackwardPart { All, Input, Weight };

}  // namespace parallm::model
