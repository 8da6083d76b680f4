// Parameter layout: every parameter of the model is a view into one flat
// buffer (and its gradient a view into a twin flat buffer at the same
// offset). The layout is a list of named slots in nanoGPT's state_dict order,
// which is also the order checkpoints and golden files use. Keeping parameters
// flat makes the optimizer one loop, gradient all-reduce a few big messages,
// and sharding a matter of offsets.
//
// The layout is also the sharding table of tensor parallelism: built for a
// ShardSpec (the tp degree and this rank's place in its group), each slot
// holds its global name and shape, its placement (replicated, or split along
// an axis, Megatron's column- and row-parallel linears) and the local shape
// this rank keeps. Init, checkpoints, ZeRO and the planner read that one table.
// With tp = 1 every slot is whole and the layout is the one-rank model's.
//
// Built for a StageSpec (pipeline parallelism), the layout holds only this
// rank's layers: the blocks of its chunks, the embeddings on the first stage,
// ln_f and a copy of the tied token table (the head) on the last. Slot names
// stay the whole model's, and each slot knows its index in the whole layout
// (its init stream, its place in a checkpoint).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/adamw.h"
#include "model/config.h"

namespace parallm::model {

// A stretch of the flat buffer an optimizer updates alike: parameters at
// offset `param` of a parameter base, gradients at `grad` of a gradient base,
// optimizer state at `state` of the optimizer's own buffers (the three differ
// when the buffers are shards, see parallel/zero.h), and whether weight decay
// applies: the kernels' AdamWRun, so the optimizer hands its runs over as they are.
using UpdateRun = kernels::AdamWRun;

// Where a tensor-parallel rank's part of a parameter comes from.
struct Placement {
  int axis = -1;  // -1: replicated (every rank holds the whole tensor); else the axis split over the group
  int parts = 1;  // the axis is `parts` equal blocks, each split over the group (c_attn's q | k | v)
  // The experts' stacked weights: rows are the experts' equal blocks, which
  // expert parallelism splits over the ep group (each rank's consecutive
  // experts: its block of the whole tensor) before the tp split applies.
  bool experts = false;
  bool sharded() const { return axis >= 0; }
};

// This rank's place in its tensor-parallel group, and in its expert-parallel group.
struct ShardSpec {
  int tp = 1;    // the group's size
  int rank = 0;  // this rank's index in it
  int ep = 1;    // the expert-parallel group's size
  int ep_rank = 0;
};

// This rank's part of a pipeline: the layer ranges [begin, end) of its
// chunks (virtual stages), in increasing order. Empty: every layer (no
// pipeline). The chunk holding layer 0 starts the model (the embedding), the
// one ending at n_layer ends it (ln_f and the tied head).
struct LayerRange {
  int64_t begin = 0, end = 0;
  bool operator==(const LayerRange&) const = default;
};
struct StageSpec {
  std::vector<LayerRange> chunks;
};

struct ParamSlot {
  std::string name;  // nanoGPT state_dict name, e.g. transformer.h.0.attn.c_attn.weight
  Shape shape;       // this rank's part (the whole tensor when replicated or tp = 1)
  Shape global_shape;
  Placement placement;  // with expert parallelism: parts counts this rank's experts
  // The block of the whole tensor this rank's part is cut from: the whole
  // tensor, or (expert parallel) this rank's experts' rows, from element
  // `block_offset` of the whole tensor (row-major, so the block is contiguous).
  Shape block_shape;
  int64_t block_offset = 0;
  // Held by this rank of the ep group alone (its experts): gradients are
  // reduced over the expert-data group, the norm and a checkpoint sum over ep.
  bool expert_split = false;
  int64_t offset = 0;  // in elements, into the flat buffer (64-byte aligned)
  int64_t numel = 0;
  bool decay = false;    // AdamW weight decay applies (2-D tensors, as nanoGPT)
  int global_index = 0;  // this slot's index in the whole model's layout (its init stream)
  // A copy of a parameter another pipeline stage holds (the last stage's tied
  // token table): its gradient is summed with the owner's, it is not counted
  // twice in the gradient norm and the owner's copy is what a checkpoint keeps.
  bool tied_copy = false;
  enum class Init { Normal, Zeros, Ones } init = Init::Normal;
  float init_std = 0.02f;
};

// Offsets of one transformer block's parameters within the flat buffer
// (-1 where the model has none). GPT-2's names; a Llama block keeps its norms
// in ln1/ln2, q_proj in qkv, o_proj in proj, gate_proj in fc, down_proj in
// fcproj, and adds k_proj, v_proj, up_proj and Qwen3's QK-norm weights.
struct BlockParams {
  int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  int64_t k_w = -1, k_b = -1, v_w = -1, v_b = -1, up_w = -1, q_norm = -1, k_norm = -1;
  // An MoE block (fc_w, up_w, fcproj_w: its shared experts, if any): the
  // router, its score-correction bias, and the experts' stacked weights
  // (gate and up [E * Fe, C], down [E * C, Fe]: expert e's rows from e * Fe, e * C).
  int64_t router = -1, router_bias = -1, ex_gate = -1, ex_up = -1, ex_down = -1;
  bool moe() const { return router >= 0; }
};

class ParamLayout {
 public:
  // The layout of `cfg` on one rank of a tensor-parallel group. ConfigError
  // when the heads (and so the attention and MLP widths) do not divide by spec.tp.
  // With `stage`, only that pipeline stage's parameters (ConfigError for
  // chunks that are empty, overlap, leave the model or are out of order).
  explicit ParamLayout(const GPTConfig& cfg, ShardSpec spec = {}, StageSpec stage = {});
  // An empty layout that another model fills with add() (offsets in call order).
  ParamLayout() = default;
  // Appends a slot (whole, replicated) and returns its offset.
  int64_t add(const std::string& name, Shape shape, ParamSlot::Init init, float std, bool decay);
  // Appends this rank's part of a parameter of `global` shape split by `placement`.
  int64_t add_part(const std::string& name, Shape global, Placement placement, ParamSlot::Init init, float std,
                   bool decay);
  const ShardSpec& spec() const { return spec_; }
  // The chunks' layer ranges (one chunk of every layer without a pipeline).
  const std::vector<LayerRange>& chunks() const { return chunks_; }
  // Whether this layout holds the embeddings (the first stage) and ln_f with
  // the head (the last); both for a whole model.
  bool first_stage() const { return first_; }
  bool last_stage() const { return last_; }
  // The whole model on one rank: no tensor and no pipeline split.
  bool whole() const {
    return spec_.tp == 1 && spec_.ep == 1 && first_ && last_ && n_layer_ == static_cast<int64_t>(held_blocks());
  }
  bool holds_block(int64_t l) const { return l >= 0 && l < n_layer_ && block_group_[l] >= 0; }
  size_t held_blocks() const;
  // The token table's rows on this rank: [v0, v0 + rows) of the vocabulary
  // padded to a multiple of tp, of which the first `valid` are real tokens.
  struct VocabRows {
    int64_t v0 = 0, rows = 0, valid = 0;
  };
  VocabRows vocab_rows() const { return vocab_; }
  // Slot s's part on this rank from the whole tensor (global_shape, row-major),
  // padding rows zero; and back: this rank's part (or, with `rank` >= 0, the
  // part of that rank of the group, which has the same shape) written into the
  // whole tensor.
  void slice(int s, const float* global, float* local) const;
  void place(int s, const float* local, float* global, int rank = -1) const;
  // Where this rank's elements [a, b) of slot s (offsets into its part) lie in
  // the whole tensor: runs of elements consecutive in both, in local order,
  // each at `whole` (row-major offset into the global tensor; -1: padding,
  // which the whole tensor does not have). A replicated slot is one run.
  struct WholeRun {
    int64_t local = 0, whole = 0, count = 0;
  };
  std::vector<WholeRun> whole_runs(int s, int64_t a, int64_t b) const;
  const std::vector<ParamSlot>& slots() const { return slots_; }
  int64_t total() const { return total_; }                          // flat buffer length (with alignment padding)
  int64_t count() const { return count_; }                          // number of real parameters
  const ParamSlot& find(const std::string& name) const;             // throws ConfigError if unknown
  const BlockParams& block(int64_t l) const { return blocks_[l]; }  // a held block (holds_block)
  int64_t wte() const { return wte_; }                              // -1 where not held (a middle stage)
  const ParamSlot& wte_slot() const { return slots_[static_cast<size_t>(unit_at(wte_))]; }  // wte() >= 0
  // The LM head's weight: the token table (tied) or lm_head.weight (untied);
  // -1 off the last stage. Its group: the embeddings' (tied) or the last one.
  int64_t head() const { return lm_head_ >= 0 ? lm_head_ : last_ ? wte_ : -1; }
  int64_t lm_head() const { return lm_head_; }  // -1: tied (or off the last stage)
  int head_group() const { return lm_head_ >= 0 ? num_groups() - 1 : last_ ? embed_group() : -1; }
  int64_t wpe() const { return wpe_; }      // -1 off the first stage
  int64_t lnf_w() const { return lnf_w_; }  // -1 off the last stage
  // Units of gradient readiness: one per parameter slot, as contiguous ranges
  // of the flat buffer (alignment padding included), in layout order.
  // Backward finishes them in nearly reverse order (wte last, since the tied
  // head and the embedding both add to it). Gradient buckets are made of them.
  struct Range {
    int64_t begin = 0, end = 0;
  };
  int num_units() const { return static_cast<int>(slots_.size()); }
  Range unit(int u) const { return {slots_[u].offset, u + 1 < num_units() ? slots_[u + 1].offset : total_}; }
  // Fills a flat buffer of total() floats: each slot by its Init (Normal draws
  // from stream (kRngInit, slot index), so any thread count gives the same
  // values; a sharded slot draws the whole tensor and keeps its part, so any
  // tp starts from the one-rank weights), alignment padding zero.
  void init(float* params, uint64_t seed) const;
  // The same values for group g only, into `out` (the group's length; a
  // sharded run initializes one group at a time).
  void init_group(int g, float* out, uint64_t seed) const;
  // The unit (slot index) of the parameter at flat offset `offset`.
  int unit_at(int64_t offset) const;
  int64_t lnf_b() const { return lnf_b_; }
  // Groups: the unit of sharding (ZeRO) and of gathering (stage 3). Group 0
  // holds the embeddings (wte, wpe; on a last stage alone, its copy of wte),
  // then one group per block; the last block's group also holds ln_f. A middle
  // pipeline stage has no embedding group. Contiguous, in layout order, tiling [0, total()).
  int num_groups() const { return static_cast<int>(groups_.size()); }
  Range group(int g) const { return groups_[g]; }
  int group_of_block(int64_t l) const { return block_group_[l]; }
  int embed_group() const { return wte_ >= 0 ? 0 : -1; }  // -1: none
  int64_t max_group_size() const;

 private:
  std::vector<Range> groups_;
  // One block's slots: GPT-2's or the Llama family's.
  BlockParams add_gpt2_block(const GPTConfig& c, const std::string& prefix);
  BlockParams add_llama_block(const GPTConfig& c, const std::string& prefix, bool moe);
  BlockParams add_moe_mlp(const GPTConfig& c, const std::string& prefix, BlockParams b);
  // Slots starting in [begin, end), into out[0, end - begin).
  void init_slots(float* out, int64_t begin, int64_t end, uint64_t seed) const;
  std::vector<ParamSlot> slots_;
  std::vector<BlockParams> blocks_;  // by layer (held ones filled)
  std::vector<int> block_group_;     // by layer: its group, -1 where not held
  std::vector<LayerRange> chunks_;
  bool first_ = true, last_ = true;
  int64_t n_layer_ = 0;
  int next_global_ = 0;  // the whole layout's index of the next slot added
  ShardSpec spec_;
  VocabRows vocab_;
  int64_t total_ = 0, count_ = 0, wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, lm_head_ = -1;
};

}  // namespace parallm::model
