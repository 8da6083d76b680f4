// The per-device kernel tables (see ops.h).
#include "kernels/ops.h"

namespace parallm::kernels {

namespace {
#define PARALLM_OPS_TABLE(ns)                                                                                      \
  Ops {                                                                                                            \
    &ns::matmul_forward, &ns::matmul_backward, &ns::layernorm_forward, &ns::layernorm_backward, &ns::gelu_forward, \
        &ns::gelu_backward, &ns::attention_forward, &ns::attention_backward, &ns::attention_workspace_floats,      \
        &ns::classifier_forward_backward, &ns::classifier_workspace_floats, &ns::classifier_logits,                \
        &ns::embedding_forward, &ns::embedding_backward, &ns::residual_forward, &ns::add_inplace,                  \
        &ns::dropout_forward, &ns::dropout_backward, &ns::adamw_step, &ns::sum_squares                             \
  }
const Ops kCpu = PARALLM_OPS_TABLE(cpu);
const Ops kCuda = PARALLM_OPS_TABLE(cuda);
#undef PARALLM_OPS_TABLE
}  // namespace

const Ops& ops_for(Device dev) {
  return dev.is_cpu() ? kCpu : kCuda;
}

}  // namespace parallm::kernels
