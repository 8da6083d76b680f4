// GPT (nanoGPT's architecture) with explicit forward and backward passes.
// Parameters and gradients are two flat buffers laid out by ParamLayout;
// activations for the largest (B, T) the model will see are allocated once at
// construction, so a training step allocates nothing. The LM head is tied to
// wte and fused with softmax + cross-entropy: when gradients are requested,
// forward already produces d(ln_f output) and the wte gradient of the head,
// and backward() continues from there down to the embeddings.
// The same code runs on the CPU or a GPU (the constructor's device): buffers
// are DeviceArrays and every kernel is called through the device's table
// (kernels/ops.h). On a GPU, params()/grads() are device pointers; tokens and
// targets are still host arrays (forward uploads them) and losses and logits
// come back to the host.
#pragma once
#include <cstdint>
#include <functional>
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
#include "model/config.h"
#include "model/param_store.h"
#include "model/params.h"
#include "model/tensor_group.h"

namespace parallm::kernels {
struct Ops;
template <class A>
struct ModelOps;
}  // namespace parallm::kernels

namespace parallm::model {

// What varies per micro-step: whether this is training (dropout on, gradients
// wanted) and where the dropout masks come from in the counter-based RNG.
struct StepContext {
  bool train = false;       // dropout active
  bool need_grad = false;   // compute gradients (requires targets)
  uint64_t seed = 0;        // dropout seed
  uint64_t micro_step = 0;  // global micro-step counter: a fresh mask per micro-step
  float loss_scale = 1.0f;  // d(total loss)/d(mean loss of this micro-batch), e.g. 1/gas
  // Called by backward as soon as the gradients of layout unit u (a
  // parameter slot) are final: data parallelism starts communication there.
  std::function<void(int)> grads_ready;
  // Index of this batch's first sample within the micro-step's global batch
  // (rank * B under data parallelism): dropout masks follow the sample, so
  // any split of a global batch over ranks draws the same masks.
  int64_t sample_offset = 0;
  // GPU: forward queues the losses' copy and returns NaN instead of waiting
  // for the GPU; deferred_loss() reads the mean later (before the next forward).
  bool defer_loss = false;
};

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
};

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
  GPT(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev = Device::cpu(), GPTStorage storage = {},
      TensorGroup* tp = nullptr, bool sequence_parallel = false);
  // From now on parameters and gradients are reached through `store`, group by
  // group (nullptr: the model's own buffers again). Not owned.
  void set_store(ParamStore* store);

  const GPTConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  Device device() const { return dev_; }
  float* params() const { return params_.data(); }  // on device()
  float* grads() const { return grads_.data(); }    // on device()
  // Host copies in and out of the flat buffers (flat_size() floats).
  void load_params(const float* host) {
    params_.copy_from_host(host, params_.size());
    params_changed();
  }
  // Call after anything writes params() (the optimizer, a checkpoint, a
  // broadcast): the bf16 compute copy is redrawn before the next forward.
  void params_changed() { lp_stale_ = true; }
  // For an optimizer that writes the bf16 copy as it updates params() in place
  // (optim::AdamW::step's params_bf16): the copy, where the model keeps one
  // and it is current. Then the step keeps it current and params_changed() is
  // not needed; with nullptr call params_changed() after the step as usual.
  bfloat16* weight_copy_for_step() const { return !lp_stale_ && params_.data() ? params_lp_.data() : nullptr; }
  // The type of activations and of the weights the kernels read (fp32 on the
  // CPU even with bf16 mixed precision, which there only rounds the operands
  // of the products: bf16_products()).
  DType compute_dtype() const { return compute_; }
  bool bf16_products() const { return bf16_products_; }
  void store_params(float* host) const { params_.copy_to_host(host, params_.size()); }
  void store_grads(float* host) const { grads_.copy_to_host(host, grads_.size()); }
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
  // After forward(): logits [B, V] of position `pos` (default: the last, T - 1) of each sequence.
  void last_logits(float* out, int64_t B, int64_t T, int64_t pos = -1);
  // After forward(..., targets, ...): logits [B*T, V] of all positions (tests, small models).
  void all_logits(float* out, int64_t B, int64_t T);

  // FLOPs per token for a training step (nanoGPT's 6N + 12*L*H*Q*T estimate).
  double flops_per_token(int64_t T) const;
  // The activation and scratch buffers a model of this shape allocates (in
  // floats, accounted as activations and scratch), without building it: what
  // `parallm plan` predicts from. Kernel workspaces depend on the threads.
  struct Buffers {
    int64_t activation_bytes = 0, scratch_bytes = 0;
  };
  static Buffers buffers(const GPTConfig& cfg, int64_t max_batch, int64_t max_seq, Device dev, int threads,
                         DType compute = DType::F32, int tp = 1, bool sequence_parallel = false);
  // Sequence parallel: the multiple every pass's B*T must be (1 otherwise).
  int64_t token_multiple() const { return sp_ ? layout_.spec().tp : 1; }

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
  DeviceArray<float> params_, grads_;                // empty where GPTStorage says so
  DeviceArray<bfloat16> params_lp_;                  // bf16 copy of params_ (GPU bf16, CPU bf16 products)
  bool lp_stale_ = true;
  ParamStore* store_ = nullptr;
  // Group g's parameters / gradient buffer (the store's, or the own buffers').
  const float* group_params(int g, Pass pass) const;
  void release_group(int g, Pass pass) const;
  float* group_grads(int g) const;
  void group_grads_done(int g) const;
  // CPU bf16 products with the model's own parameters: the scope under which
  // the kernels read weights from params_lp_ (redrawn first if stale).
  std::optional<kernels::Bf16CopyScope> weight_copy_scope();
  // Group g's parameters in the compute type A (bf16: the refreshed copy).
  template <class A>
  const A* params_of(int g, Pass pass);
  template <class A>
  float forward_impl(const kernels::ModelOps<A>& k, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                     const StepContext& ctx);
  template <class A>
  void backward_impl(const kernels::ModelOps<A>& k, const int32_t* tokens, int64_t B, int64_t T,
                     const StepContext& ctx);
  float* host_losses() const;  // the losses' part of staging_
  static float mean_of(const float* losses, int64_t n);
  kernels::AttnDropout attn_dropout(const StepContext& ctx, int64_t l, float p) const;
  // One pass's shape: B, T, N = B*T rows, Nl of them on this rank (sequence
  // parallel: N/tp), the dropout rate and the global index of element 0 of
  // this rank's residual rows (layout-invariant masks).
  struct Fwd {
    int64_t B = 0, T = 0, N = 0, Nl = 0;
    float p = 0;
    uint64_t drop_base = 0;
    const StepContext* ctx = nullptr;
  };
  Fwd pass_shape(const StepContext& ctx, int64_t B, int64_t T) const;
  // Transformer block l's forward from its input x (parameters at P, the block's group from flat offset p0).
  template <class A>
  void block_forward(const kernels::ModelOps<A>& k, int64_t l, const A* x, const A* P, int64_t p0, const Fwd& f);
  template <class A>
  void linear_residual(const kernels::ModelOps<A>& k, A* out, const A* res, const A* inp, const A* w, const A* bias,
                       int64_t IN, int64_t l, uint64_t site, const Fwd& f);
  void zero_device(void* p, size_t bytes) const;
  // Sequence parallel: this rank's rows of a [N, C] activation gathered into
  // the whole-row buffer; otherwise the activation itself.
  template <class A>
  const A* whole_rows(const A* local, int64_t N);
  // The tied head and the loss over this rank's vocabulary rows (tensor parallel).
  template <class A>
  void vocab_parallel_loss(const kernels::ModelOps<A>& k, float* losses, A* dlnf, float* dwte, const A* lnf,
                           const A* wte, const int32_t* targets, int64_t N, float dloss);
  template <class A>
  void logits_impl(const kernels::ModelOps<A>& k, float* out, int64_t B, int64_t T, int64_t pos);  // pos < 0: all
  // Activations in the compute type (acts_ or acts_lp_) with offsets per
  // layer, fp32 statistics beside them; backward's temporaries likewise
  // (scratch_ or scratch_lp_); fp32 kernel workspaces.
  DeviceArray<float> acts_, scratch_;
  DeviceArray<bfloat16> acts_lp_, scratch_lp_;
  DeviceArray<float> stats_, ws_;
  // GPU only: this batch's tokens and targets, and their uploads and the
  // losses' copy back through page-locked staging ([tokens | targets |
  // losses]), so neither waits for the GPU to go idle. `uploaded_` guards the
  // staging against an upload still pending, `losses_copied_` the losses.
  DeviceArray<int32_t> tokens_d_, targets_d_;
  gpu::PinnedBuffer staging_;
  std::unique_ptr<gpu::Event> uploaded_, losses_copied_;
  int64_t pending_losses_ = 0;  // positions of a deferred loss not yet read
  // The buffer of a pair (fp32, bf16) that holds the compute type A.
  template <class A>
  static A* of_type(const DeviceArray<float>& f32, const DeviceArray<bfloat16>& lp, int64_t off) {
    if constexpr (std::is_same_v<A, float>)
      return f32.data() + off;
    else
      return lp.data() + off;
  }
  template <class A>
  A* act(int64_t off) const {
    return of_type<A>(acts_, acts_lp_, off);
  }
  template <class A>
  A* scr(int64_t off) const {
    return of_type<A>(scratch_, scratch_lp_, off);
  }
  float* stat(int64_t off) const { return stats_.data() + off; }
  // Layout of activations for a given (B, T): computed for max sizes, reused.
  struct LayerActs {
    int64_t ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res3;
  };
  // Every buffer offset for a (B, T), and the totals: means, rstds, lse and
  // losses index stats_, the rest acts_ (s_* index scratch_).
  struct Carve {
    std::vector<LayerActs> la;
    int64_t encoded = 0, lnf = 0, lnf_mean = 0, lnf_rstd = 0, losses = 0, dlnf = 0;
    int64_t logits = 0, xmax = 0, xsums = 0, dlogits = 0;  // vocabulary-parallel loss (tp > 1)
    int64_t s_full = 0, s_gfull = 0, ln_grad = 0;          // sequence parallel: whole-row buffers, LayerNorm grads
    int64_t s_dres = 0, s_tmp = 0, s_dfch = 0, s_dfch2 = 0;
    int64_t acts = 0, stats = 0, scratch = 0, ws = 0;  // element counts
    Buffers sizes;
  };
  static Carve carve(const GPTConfig& cfg, int64_t B, int64_t T, Device dev, int threads, DType compute, int tp,
                     bool sp);
  Carve off_;  // offsets into acts_ and scratch_ for the allocated (max) B, T
  int64_t cur_B_ = 0, cur_T_ = 0;
  bool grads_ready_ = false;
};

}  // namespace parallm::model
