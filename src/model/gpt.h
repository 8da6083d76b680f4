// GPT (nanoGPT's architecture) with explicit forward and backward passes:
// an Embedding, Gpt2Blocks, ln_f and a Head (layers.h, vocab_layers.h,
// gpt2_block.h), each owning its communication under tp, sp and cp.
// Parameters and gradients are reached through ParamAccess (two flat buffers
// laid out by ParamLayout, or a ZeRO store); activations for the largest
// (B, T) are allocated once (Activations), so a step allocates nothing. The
// LM head (wte, or an untied lm_head.weight) is fused with softmax +
// cross-entropy: with gradients, forward already produces d(ln_f output) and
// the head's weight gradient, and backward() continues down to the embeddings.
// The same code runs on the CPU or a GPU (the constructor's device): buffers
// are DeviceArrays and every kernel is called through the device's table
// (kernels/ops.h). On a GPU, params()/grads() are device pointers; tokens and
// targets are still host arrays (forward uploads them) and losses and logits
// come back to the host.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/device_array.h"
#include "core/gpu.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/context_group.h"
#include "model/cp_attention.h"
#include "model/gpt2_block.h"
#include "model/layers.h"
#include "model/param_access.h"
#include "model/param_store.h"
#include "model/params.h"
#include "model/pass.h"
#include "model/stage.h"
#include "model/tensor_group.h"
#include "model/vocab_layers.h"

namespace parallm::kernels {
struct Ops;
template <class A>
struct ModelOps;
}  // namespace parallm::kernels

namespace parallm::model {

class GPT {
 public:
  // With a tensor-parallel group `tp` (not owned; nullptr or a group of one:
  // the whole model) the model holds this rank's part of every parameter
  // (ParamLayout's table for ShardSpec{tp size, tp rank}) and runs Megatron's
  // tensor parallelism: attention split by heads, the MLP by its hidden
  // width, the token table and the loss by vocabulary rows. With
  // `sequence_parallel` (Megatron SP, tp > 1) LayerNorm, dropout and the
  // residual stream hold only this rank's rows (B*T/tp consecutive tokens of
  // the batch), gathered before the column-parallel products and
  // reduce-scattered after the row-parallel ones; every pass's B*T must then
  // divide by tp.
  // With `pipe`, the model holds one pipeline stage (PipelinePart above).
  // With a context-parallel group in `cp` (context parallelism, issue 36)
  // each sequence is split over the group as cp.layout() says: every pass's
  // T (and max_seq) is this rank's T/C positions, held in local order;
  // position embeddings, dropout masks and attention use the global
  // positions, so the group's passes together are the one-rank pass over
  // the whole sequence (cp_attention.h exchanges K and V, or heads).
  GPT(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev = Device::cpu(), GPTStorage storage = {},
      TensorGroup* tp = nullptr, bool sequence_parallel = false, PipelinePart pipe = {}, ContextPart cp = {});
  // From now on parameters and gradients are reached through `store`, group by
  // group (nullptr: the model's own buffers again). Not owned.
  void set_store(ParamStore* store);

  const GPTConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  Device device() const { return dev_; }
  float* params() const { return pa_.params(); }  // on device()
  float* grads() const { return pa_.grads(); }    // on device()
  // Host copies in and out of the flat buffers (flat_size() floats).
  void load_params(const float* host) { pa_.load(host); }
  // Call after anything writes params() (the optimizer, a checkpoint, a
  // broadcast): the bf16 compute copy is redrawn before the next forward.
  void params_changed() { pa_.changed(); }
  // For an optimizer that writes the bf16 copy as it updates params() in place
  // (optim::AdamW::step's params_bf16): the copy, where the model keeps one
  // and it is current. Then the step keeps it current and params_changed() is
  // not needed; with nullptr call params_changed() after the step as usual.
  bfloat16* weight_copy_for_step() const { return pa_.current_copy(); }
  // The type of activations and of the weights the kernels read (fp32 on the
  // CPU even with bf16 mixed precision, which there only rounds the operands
  // of the products: bf16_products()).
  DType compute_dtype() const { return compute_; }
  bool bf16_products() const { return bf16_products_; }
  void store_params(float* host) const { pa_.store(host); }
  void store_grads(float* host) const { pa_.store_grads(host); }
  int64_t flat_size() const { return layout_.total(); }
  // nanoGPT's count: all parameters except wpe (lm_head is tied to wte).
  int64_t num_params_nanogpt() const;
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;

  // GPT-2 init from the counter-based RNG (each parameter its own stream).
  void init_weights(uint64_t seed);
  void zero_grad();

  // Runs the model on tokens [B, T]. With targets, returns the mean
  // cross-entropy loss (and fills per-position losses); without, returns 0.
  float forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, const StepContext& ctx);
  // The mean loss of the last forward with ctx.defer_loss; waits for the
  // forward's end on the GPU, not for later work.
  float deferred_loss();
  // Accumulates gradients (+=) of loss_scale * mean loss into grads(). Call
  // after forward() with ctx.need_grad and the same B, T, ctx.
  void backward(const int32_t* tokens, int64_t B, int64_t T, const StepContext& ctx);

  // Pipeline stages: the passes over chunk `chunk` of this rank (0-based, in
  // layer order) for the micro-batch held in activation set `set` (< its
  // in-flight count). forward_chunk starts from the tokens on the model's
  // first chunk, else from chunk_input (received first); on the last chunk it
  // returns the loss (with targets), else 0 and the output lies in
  // chunk_output. backward_chunk (after forward_chunk with need_grad on the
  // same set) starts from chunk_grad, which holds d(output) (received first;
  // on the last chunk from the loss), and leaves d(input) there (to send; the
  // first chunk has none). BackwardPart::Input then Weight with split_backward.
  // forward()/backward() above are chunk 0, set 0 of a whole model.
  int num_chunks() const { return static_cast<int>(layout_.chunks().size()); }
  bool first_chunk(int chunk) const { return chunk == 0 && layout_.first_stage(); }
  bool last_chunk(int chunk) const { return chunk == num_chunks() - 1 && layout_.last_stage(); }
  float forward_chunk(int chunk, int set, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                      const StepContext& ctx);
  void backward_chunk(int chunk, int set, const int32_t* tokens, int64_t B, int64_t T, const StepContext& ctx,
                      BackwardPart part = BackwardPart::All);
  // The messages between stages: `message_count(B, T)` elements of the
  // compute type (this rank's rows of the residual stream) on device().
  void* chunk_input(int chunk, int set);
  void* chunk_output(int chunk, int set);
  void* chunk_grad(int chunk, int set);
  int64_t message_count(int64_t B, int64_t T) const { return B * T / token_multiple() * cfg_.n_embd; }

  // After forward(): logits [B, V] of position `pos` (default: the last, T - 1) of each sequence.
  void last_logits(float* out, int64_t B, int64_t T, int64_t pos = -1);
  // After forward(..., targets, ...): logits [B*T, V] of all positions (tests, small models).
  void all_logits(float* out, int64_t B, int64_t T);

  // FLOPs per token for a training step (nanoGPT's 6N + 12*L*H*Q*T estimate).
  double flops_per_token(int64_t T) const;
  // The activation and scratch buffers a model of this shape allocates (in
  // floats, accounted as activations and scratch), without building it: what
  // `parallm plan` predicts from. Kernel workspaces depend on the threads.
  using Buffers = ActivationBytes;
  // Context parallel, max_seq is the local length (T / cp.size).
  static Buffers buffers(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev, int threads,
                         DType compute = DType::F32, int tp = 1, bool sequence_parallel = false,
                         const PipelinePart& pipe = {}, const CpLayout& cp = {});
  // Sequence parallel: the multiple every pass's B*T must be (1 otherwise).
  int64_t token_multiple() const { return sp_ ? layout_.spec().tp : 1; }
  // Context parallel: the split (size 1 without), and the ring's attention
  // measurement (CpAttention::block_cpu_seconds; 0 without a ring).
  const CpLayout& cp_layout() const { return cpl_; }
  double cp_block_cpu_seconds() const { return cpa_ ? cpa_->block_cpu_seconds() : 0.0; }

 private:
  GPTConfig cfg_;
  ParamLayout layout_;
  int64_t max_B_, max_T_;
  Device dev_;
  DType compute_;
  const kernels::Ops* k_;
  const kernels::ModelOps<bfloat16>* kb_ = nullptr;  // bf16 compute only
  bool bf16_products_ = false;                       // CPU bf16: fp32 activations, bf16 products
  TensorGroup* tp_ = nullptr;                        // null: the whole model on this rank
  bool sp_ = false;                                  // sequence parallel (with tp_)
  CpLayout cpl_;                                     // context parallel: this rank's positions
  std::unique_ptr<CpAttention> cpa_;                 // context parallel (cp > 1): the attention exchange
  ParamAccess pa_;                                   // the parameters and gradients: own buffers or a store's groups
  template <class A>
  float forward_impl(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const int32_t* targets, int64_t B,
                     int64_t T, const StepContext& ctx);
  // Backward of the selected chunk and set: all of it, or the input half (B:
  // input gradients and LayerNorm gradients, keeping the linear layers'
  // output gradients) or the weight half (W: the linear layers' and the
  // embedding's gradients from what B kept).
  template <class A>
  void backward_impl(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const PassShape& f,
                     BackwardPart part);
  template <class A>
  void weight_backward(const kernels::ModelOps<A>& k, int chunk, const int32_t* tokens, const PassShape& f);
  // The first chunk's embedding gradients from d(embedding output) `demb`.
  // The last chunk's ln_f, head and loss from the last block's output x.
  template <class A>
  float head_forward(const kernels::ModelOps<A>& k, const A* x, const ParamView<A>& PE, const ParamView<A>& P,
                     const int32_t* targets, const PassShape& f);
  template <class A>
  void embedding_backward(const kernels::ModelOps<A>& k, const A* demb, const int32_t* tokens, const PassShape& f);
  // Checks a pass's shape and tokens and (GPU) uploads them into activation set `set`'s copies.
  void begin_pass(int chunk, int set, const int32_t*& tokens, const int32_t*& targets, int64_t B, int64_t T,
                  const char* where);
  float* host_losses() const;  // the losses' part of staging_
  static float mean_of(const float* losses, int64_t n);
  PassShape pass_shape(const StepContext& ctx, int64_t B, int64_t T) const;
  // Each held block (by layer), ln_f, the vocabulary layers, and the tensor
  // split they share; what the blocks' passes use of the model.
  std::vector<Gpt2Block> blocks_;
  LayerNorm lnf_;
  Embedding embed_;
  Head head_;
  TensorSplit split_;
  void build_layers();
  BlockEnv block_env() { return {acts_, split_, *k_, dev_, &layout_, cfg_.gelu, cfg_.recompute}; }
  // The numeric detector (gpt_watch.cpp): a layer's tensors handed to the
  // watch after its forward (weights, then outputs) and backward (weight
  // gradients, then d(input)); `slots` names parameters by flat offset in a
  // buffer `base` that begins at flat offset p0 (-1: absent).
  template <class T>
  void watch_slots(NumericWatch& w, std::initializer_list<int64_t> slots, const T* base, int64_t p0,
                   const char* suffix) const;
  template <class A>
  void watch_embed(NumericWatch& w, const A* x, const A* PE, int64_t e0, const PassShape& f) const;
  template <class A>
  void watch_block(NumericWatch& w, int64_t l, const A* P, int64_t p0, const PassShape& f) const;
  template <class A>
  void watch_head(NumericWatch& w, const A* P, int64_t p0, bool loss, const PassShape& f) const;
  template <class A>
  void watch_grads(NumericWatch& w, int64_t l, const float* G, int64_t p0, const A* dres, BackwardPart part,
                   const PassShape& f) const;
  void watch_embed_grads(NumericWatch& w, const float* GE, int64_t e0, const PassShape& f) const;
  void zero_device(void* p, size_t bytes) const;
  template <class A>
  void logits_impl(const kernels::ModelOps<A>& k, float* out, int64_t B, int64_t T, int64_t pos);  // pos < 0: all
  // GPU only: this batch's tokens and targets, and their uploads and the
  // losses' copy back through page-locked staging ([tokens | targets |
  // losses]), so neither waits for the GPU to go idle. `uploaded_` guards the
  // staging against an upload still pending, `losses_copied_` the losses.
  DeviceArray<int32_t> tokens_d_, targets_d_;
  gpu::PinnedBuffer staging_;
  std::unique_ptr<gpu::Event> uploaded_, losses_copied_;
  int64_t pending_losses_ = 0;  // positions of a deferred loss not yet read
  Activations acts_;
  PipelinePart pipe_;
  int last_fwd_chunk_ = -1, last_fwd_set_ = -1;  // recompute: whose forward the shared buffers hold
  int64_t cur_B_ = 0, cur_T_ = 0;                // the last forward of the model's last chunk (logits) ...
  int logits_set_ = 0;                           // ... and its activation set
};

}  // namespace parallm::model
