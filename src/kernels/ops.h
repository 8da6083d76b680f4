// The kernels of one device as a table of function pointers, so a model or an
// optimizer written once runs on the CPU (kernels::cpu) or the GPU
// (kernels::cuda): it holds `const Ops& k = ops_for(device)` and calls
// k.layernorm_forward(...). The signatures are the contract headers'.
#pragma once
#include "core/device.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace parallm::kernels {

struct Ops {
  decltype(&cpu::matmul_forward) matmul_forward;
  decltype(&cpu::matmul_backward) matmul_backward;
  decltype(&cpu::layernorm_forward) layernorm_forward;
  decltype(&cpu::layernorm_backward) layernorm_backward;
  decltype(&cpu::gelu_forward) gelu_forward;
  decltype(&cpu::gelu_backward) gelu_backward;
  decltype(&cpu::attention_forward) attention_forward;
  decltype(&cpu::attention_backward) attention_backward;
  decltype(&cpu::attention_workspace_floats) attention_workspace_floats;
  decltype(&cpu::classifier_forward_backward) classifier_forward_backward;
  decltype(&cpu::classifier_workspace_floats) classifier_workspace_floats;
  decltype(&cpu::classifier_logits) classifier_logits;
  decltype(&cpu::embedding_forward) embedding_forward;
  decltype(&cpu::embedding_backward) embedding_backward;
  decltype(&cpu::residual_forward) residual_forward;
  decltype(&cpu::add_inplace) add_inplace;
  decltype(&cpu::dropout_forward) dropout_forward;
  decltype(&cpu::dropout_backward) dropout_backward;
  decltype(&cpu::adamw_step) adamw_step;
  decltype(&cpu::sum_squares) sum_squares;
};

// The table for a device; a CUDA device in a CPU-only build gets the stubs,
// which throw CudaError("CUDA was not built") when called.
const Ops& ops_for(Device dev);

}  // namespace parallm::kernels
