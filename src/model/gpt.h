// The model (GPT-2 or the Llama family): explicit passes over the layers of its spec (model_spec.h), each owning its
// communication. A step allocates nothing: parameters through ParamAccess (own buffers or a ZeRO store), activations
// carved once for the largest (B, T), the batch through BatchIo. The head is fused with the loss. On a GPU
// params()/grads() are device pointers; tokens, targets, losses and logits stay host arrays.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/activations.h"
#include "model/batch_io.h"
#include "model/cp_attention.h"
#include "model/kv_cache.h"
#include "model/model_spec.h"
#include "model/model_watch.h"
#include "model/param_access.h"
#include "model/pass.h"
#include "model/pass_graphs.h"
#include "model/rope.h"
#include "model/stage.h"
#include "model/vocab_layers.h"

namespace parallm::model {

class GPT {
 public:
  // `tp` (not owned; null: the whole model): this rank's part of each parameter (ParamLayout's table), Megatron's
  // split; `sequence_parallel`: B*T/tp residual rows. `pipe`: one stage. `cp`: T and max_seq are this rank's T/C
  // positions. `experts`: the MoE layers' groups (moe_layer.h): the ranks splitting the micro-batch (routing counts
  // summed there) and the expert-parallel group splitting the experts. docs/design.md ("The model as layers").
  GPT(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev = Device::cpu(), GPTStorage storage = {},
      TensorGroup* tp = nullptr, bool sequence_parallel = false, PipelinePart pipe = {}, ContextPart cp = {},
      ExpertPart experts = {});
  // MoE (moe_layer.h): the balancing and z-loss values summed since the last take; layer l's expert choices [N x
  // top_k] in its chunk's last forward (set 0; empty for a dense or not held layer).
  Activations::MoeTally take_moe_tally();
  // model.moe_bias_update_rate: each held layer's selection bias moved to balance by this step's tally (before
  // take_moe_tally), alike on all ranks.
  void balance_expert_bias();
  std::vector<int32_t> expert_choices(int64_t l);
  void set_store(ParamStore* store);  // parameters and gradients through `store` (not owned); null: own buffers
  std::string use_cuda_graphs();      // train.cuda_graphs (pass_graphs.h): "" or why the passes must stay eager
  std::string graph_summary() const;  // what the graphs did, for the run's log ("" without graphs)
  const GPTConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  Device device() const { return dev_; }
  float* params() const { return pa_.params(); }           // on device()
  float* grads() const { return pa_.grads(); }             // on device()
  void load_params(const float* host) { pa_.load(host); }  // host copies in and out (flat_size() floats)
  void params_changed() { pa_.changed(); }                 // after anything writes params(): the bf16 copy is redrawn
  bfloat16* weight_copy_for_step() const { return pa_.current_copy(); }  // the bf16 copy a step keeps (null: none)
  DType compute_dtype() const { return compute_; }                       // activations' (CPU bf16: fp32, bf16 products)
  bool bf16_products() const { return products_ == CpuProducts::Bf16; }
  CpuProducts cpu_products() const { return products_; }  // CPU: fp32 activations, these products
  void store_params(float* host) const { pa_.store(host); }
  void store_grads(float* host) const { pa_.store_grads(host); }
  int64_t flat_size() const { return layout_.total(); }
  int64_t num_params_nanogpt() const;  // nanoGPT's count: all parameters except wpe
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;
  void init_weights(uint64_t seed);  // GPT-2 init, each parameter its own counter-based stream
  void zero_grad();
  // Tokens [B, T]; with targets, the mean cross-entropy loss (else 0).
  float forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, const StepContext& ctx);
  // The mean loss of the last forward with ctx.defer_loss (waits for that forward only).
  float deferred_loss();
  // grads() += d(loss_scale * mean loss), after forward() with ctx.need_grad and the same B, T, ctx.
  void backward(const int32_t* tokens, int64_t B, int64_t T, const StepContext& ctx);
  // Pipeline stages: chunk `chunk`'s passes for activation set `set` (tokens or chunk_input to the loss or
  // chunk_output; backward from chunk_grad, leaving d(input) there). forward()/backward(): chunk 0, set 0.
  int num_chunks() const { return static_cast<int>(layout_.chunks().size()); }
  bool first_chunk(int chunk) const { return chunk == 0 && layout_.first_stage(); }
  bool last_chunk(int chunk) const { return chunk == num_chunks() - 1 && layout_.last_stage(); }
  float forward_chunk(int chunk, int set, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                      const StepContext& ctx);
  void backward_chunk(int chunk, int set, const int32_t* tokens, int64_t B, int64_t T, const StepContext& ctx,
                      BackwardPart part = BackwardPart::All);
  // The messages between stages: message_count(B, T) elements of the compute type, on device().
  void* chunk_input(int chunk, int set);
  void* chunk_output(int chunk, int set);
  void* chunk_grad(int chunk, int set);
  int64_t message_count(int64_t B, int64_t T) const { return B * T / token_multiple() * cfg_.n_embd; }
  // After forward(): logits [B, V] of position `pos` (default T - 1) of each sequence; [B*T, V] of all (targets).
  void last_logits(float* out, int64_t B, int64_t T, int64_t pos = -1);
  void all_logits(float* out, int64_t B, int64_t T);
  // KV cache (kv_cache.h): one sequence's next n tokens, theirs added, the last one's logits [V] written.
  bool decode_supported() const;  // the whole model on this rank, fp32 activations
  void decode(const int32_t* tokens, int64_t n, KvCache& cache, float* logits);
  double flops_per_token(int64_t T) const;  // a training step's (6N + 12 L H Q T; N: active parameters)
  // What a model of this shape allocates, without building it (`parallm plan`); max_seq: T / cp.size.
  using Buffers = ActivationBytes;
  static Buffers buffers(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev, int threads,
                         DType compute = DType::F32, int tp = 1, bool sequence_parallel = false,
                         const PipelinePart& pipe = {}, const CpLayout& cp = {}, int ep = 1);
  int64_t token_multiple() const { return sp_ ? layout_.spec().tp : 1; }  // B*T's multiple (sequence parallel)
  const CpLayout& cp_layout() const { return cpl_; }  // context parallel: the split (size 1 without), ...
  double cp_block_cpu_seconds() const { return cpa_ ? cpa_->block_cpu_seconds() : 0.0; }  // ... the ring's (0)

 private:
  GPTConfig cfg_;
  ParamLayout layout_;
  int64_t max_B_, max_T_;
  Device dev_;
  DType compute_;
  const kernels::Ops* k_;
  const kernels::ModelOps<bfloat16>* kb_ = nullptr;  // bf16 compute only
  CpuProducts products_ = CpuProducts::Fp32;         // low-precision products (fp32 activations, or GPU FP8 bf16)
  TensorGroup* tp_ = nullptr;                        // null: the whole model on this rank
  ExpertPart experts_;                               // MoE: the data and expert-parallel groups
  bool sp_ = false;                                  // sequence parallel (with tp_)
  CpLayout cpl_;                                     // context parallel: this rank's positions
  std::unique_ptr<CpAttention> cpa_;                 // context parallel (cp > 1): the attention exchange
  ParamAccess pa_;
  Activations acts_;
  BatchIo io_;
  PipelinePart pipe_;
  ModelSpec spec_;                               // the layers
  mutable RopeTable rope_;                       // rotary models: the table of each pass's positions
  int last_fwd_chunk_ = -1, last_fwd_set_ = -1;  // recompute: whose forward the shared buffers hold
  int64_t cur_B_ = 0, cur_T_ = 0;                // the last forward of the model's last chunk (logits) ...
  int logits_set_ = 0;                           // ... and its activation set
  std::unique_ptr<PassGraphs> graphs_;           // train.cuda_graphs (null: off)
  void build_layers();
  BlockEnv block_env() { return {acts_, spec_.split, *k_, dev_, &layout_, cfg_.gelu, cfg_.recompute}; }
  ModelWatch watch() const { return {&cfg_, &layout_, &acts_}; }
  void begin_pass(int chunk, int set, const int32_t*& tokens, const int32_t*& targets, int64_t B, int64_t T,
                  const char* where);
  PassShape pass_shape(const StepContext& ctx, int64_t B, int64_t T, int64_t pos0 = 0, KvCache* cache = nullptr) const;
  // A pass's device work only (its host part is the caller's: a CUDA graph may replay it; losses in the set's stats).
  template <class A>
  void forward_impl(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const int32_t* targets,
                    const PassShape& f);
  template <class A>
  void head_forward(const kernels::ModelOps<A>& k, const A* x, const ParamView<A>& PE, const ParamView<A>& P,
                    const int32_t* targets, const PassShape& f);
  template <class A>
  void backward_impl(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const PassShape& f,
                     BackwardPart part, bool fresh);
  PassGraphs* graphs_for(const StepContext& ctx);  // null: run the pass eagerly
  template <class A>
  void weight_backward(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const PassShape& f);
  template <class A>
  void embedding_backward(const kernels::ModelOps<A>& k, const A* demb, const int32_t* tokens, const PassShape& f);
  template <class A>
  void logits_impl(const kernels::ModelOps<A>& k, float* out, int64_t B, int64_t T, int64_t pos);  // pos < 0: all
};

}  // namespace parallm::model
