#include "model/params.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/host.h"
#include "core/rng.h"

namespace parallm::model {

void ParamLayout::init(float* params, uint64_t seed) const {
  for (int g = 0; g < num_groups(); ++g) init_group(g, params + groups_[g].begin, seed);
  if (groups_.empty()) init_slots(params, 0, total_, seed);
}

void ParamLayout::init_group(int g, float* out, uint64_t seed) const {
  init_slots(out, groups_[g].begin, groups_[g].end, seed);
}

void ParamLayout::init_slots(float* out, int64_t begin, int64_t end, uint64_t seed) const {
  std::fill(out, out + (end - begin), 0.0f);
  std::vector<float> whole;  // a sharded slot's global tensor
  for (size_t i = 0; i < slots_.size(); ++i) {
    const ParamSlot& s = slots_[i];
    if (s.offset < begin || s.offset >= end) continue;
    float* p = out + (s.offset - begin);
    switch (s.init) {
      case ParamSlot::Init::Normal:
        if (!s.placement.sharded()) {
          fill_normal(p, s.numel, 0.0f, s.init_std, seed, stream_id(kRngInit, s.global_index));
          break;
        }
        whole.resize(static_cast<size_t>(shape_numel(s.global_shape)));
        fill_normal(whole.data(), static_cast<int64_t>(whole.size()), 0.0f, s.init_std, seed,
                    stream_id(kRngInit, s.global_index));
        slice(static_cast<int>(i), whole.data(), p);
        break;
      case ParamSlot::Init::Zeros:
        break;  // zero already
      case ParamSlot::Init::Ones:
        std::fill(p, p + s.numel, 1.0f);
        break;
    }
  }
}

namespace {
// The global index along a split axis of local index i: the axis is `parts`
// blocks of `global_len / parts` (padded), each split into tp pieces of
// `local_len / parts`; -1 for a padding index past the real length.
struct AxisMap {
  int64_t global_len, padded_len, local_len, parts, rank;
  int64_t operator()(int64_t i) const {
    const int64_t piece = local_len / parts, p = i / piece;
    const int64_t g = p * (padded_len / parts) + rank * piece + i % piece;
    return g < global_len ? g : -1;
  }
};

// The split of the slot's block (the whole tensor, or this rank's experts) over tp.
AxisMap axis_map(const ParamSlot& s, ShardSpec spec) {
  const int a = s.placement.axis;
  return {s.block_shape[a], s.shape[a] * spec.tp, s.shape[a], s.placement.parts, spec.rank};
}
}  // namespace

void ParamLayout::slice(int i, const float* global, float* local) const {
  const ParamSlot& s = slots_[i];
  global += s.block_offset;
  if (!s.placement.sharded()) {
    std::copy(global, global + s.numel, local);
    return;
  }
  const AxisMap m = axis_map(s, spec_);
  const int64_t rows = s.shape[0], cols = s.shape.size() > 1 ? s.shape[1] : 1;
  const int64_t gcols = s.block_shape.size() > 1 ? s.block_shape[1] : 1;
  if (s.placement.axis == 0) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = m(r);
      if (g < 0)
        std::fill(local + r * cols, local + (r + 1) * cols, 0.0f);
      else
        std::copy(global + g * gcols, global + (g + 1) * gcols, local + r * cols);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) local[r * cols + c] = global[r * gcols + m(c)];
}

void ParamLayout::place(int i, const float* local, float* global, int rank) const {
  const ParamSlot& s = slots_[i];
  global += s.block_offset;
  if (!s.placement.sharded()) {
    std::copy(local, local + s.numel, global);
    return;
  }
  PARALLM_CHECK(rank < spec_.tp, InternalError, "model.params", "rank {} is outside a group of {}", rank, spec_.tp);
  const AxisMap m = axis_map(s, rank < 0 ? spec_ : ShardSpec{spec_.tp, rank});
  const int64_t rows = s.shape[0], cols = s.shape.size() > 1 ? s.shape[1] : 1;
  const int64_t gcols = s.block_shape.size() > 1 ? s.block_shape[1] : 1;
  if (s.placement.axis == 0) {
    for (int64_t r = 0; r < rows; ++r)
      if (const int64_t g = m(r); g >= 0) std::copy(local + r * cols, local + (r + 1) * cols, global + g * gcols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) global[r * gcols + m(c)] = local[r * cols + c];
}

std::vector<ParamLayout::WholeRun> ParamLayout::whole_runs(int i, int64_t a, int64_t b) const {
  const ParamSlot& s = slots_[i];
  PARALLM_CHECK(0 <= a && a <= b && b <= s.numel, InternalError, "model.params", "elements [{}, {}) outside {} ({})", a,
                b, s.name, s.numel);
  std::vector<WholeRun> out;
  // Local elements [l, l + n) at whole offset w (-1: padding), merged into the previous run where both continue it.
  auto push = [&](int64_t l, int64_t w, int64_t n) {
    if (n <= 0) return;
    if (!out.empty()) {
      WholeRun& r = out.back();
      const bool pad = w < 0, prev_pad = r.whole < 0;
      if (r.local + r.count == l && pad == prev_pad && (pad || r.whole + r.count == w)) {
        r.count += n;
        return;
      }
    }
    out.push_back({l, w, n});
  };
  const int64_t base = s.block_offset;  // the block's first element in the whole tensor
  if (!s.placement.sharded()) {
    push(a, base + a, b - a);
    return out;
  }
  const AxisMap m = axis_map(s, spec_);
  const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1;
  const int64_t gcols = s.block_shape.size() > 1 ? s.block_shape[1] : 1;
  for (int64_t r = a / cols; r * cols < b; ++r) {
    const int64_t c0 = std::max(a - r * cols, int64_t{0}), c1 = std::min(b - r * cols, cols);
    if (s.placement.axis == 0) {  // a local row is a whole row
      const int64_t g = m(r);
      push(r * cols + c0, g < 0 ? -1 : base + g * gcols + c0, c1 - c0);
      continue;
    }
    // Split columns: within each of the `parts` blocks a run of consecutive whole columns, then padding.
    const int64_t piece = cols / s.placement.parts;
    for (int64_t c = c0; c < c1;) {
      const int64_t end = std::min(c1, (c / piece + 1) * piece), g = m(c);
      const int64_t real = g < 0 ? 0 : std::min(end - c, s.block_shape[1] - g);
      push(r * cols + c, base + r * gcols + g, real);
      push(r * cols + c + real, -1, end - c - real);
      c = end;
    }
  }
  return out;
}

int64_t ParamLayout::add_part(const std::string& name, Shape global, Placement placement, ParamSlot::Init init,
                              float std, bool decay) {
  const bool ep = placement.experts && spec_.ep > 1;
  if (!ep && (!placement.sharded() || spec_.tp == 1)) return add(name, std::move(global), init, std, decay);
  // The block this rank's part is cut from: the whole tensor, or its experts' rows.
  Shape block = global;
  int64_t block_offset = 0;
  if (ep) {
    block[0] = global[0] / spec_.ep;
    block_offset = spec_.ep_rank * shape_numel(block);
    if (placement.axis == 0) placement.parts /= spec_.ep;
  }
  Shape local = block;
  const int64_t len = block[placement.axis], unit = placement.parts * spec_.tp;
  PARALLM_CHECK((placement.axis == 0 && placement.parts == 1) || len % unit == 0, InternalError, "model.params",
                "{}: only a single-part split of rows may be padded ({} over {} parts x tp {})", name, len,
                placement.parts, spec_.tp);
  local[placement.axis] = (len + unit - 1) / unit * placement.parts;  // rows past len are padding
  const int64_t off = add(name, local, init, std, decay);
  ParamSlot& s = slots_.back();
  s.global_shape = std::move(global);
  s.block_shape = std::move(block);
  s.block_offset = block_offset;
  s.expert_split = ep;
  s.placement = placement;
  const int64_t padding = local[placement.axis] * spec_.tp - len;
  if (padding > 0) {  // only the last ranks' parts reach into the padding
    const int64_t real = std::clamp<int64_t>(len - spec_.rank * local[placement.axis], 0, local[placement.axis]);
    count_ -= s.numel - s.numel / local[placement.axis] * real;
  }
  return off;
}

int64_t ParamLayout::add(const std::string& name, Shape shape, ParamSlot::Init init, float std, bool decay) {
  ParamSlot s;
  s.name = name;
  s.global_shape = shape;
  s.block_shape = shape;
  s.shape = std::move(shape);
  s.numel = shape_numel(s.shape);
  s.offset = total_;
  s.init = init;
  s.init_std = std;
  s.decay = decay;
  s.global_index = next_global_++;
  total_ += (s.numel + 15) / 16 * 16;  // keep every parameter 64-byte aligned
  count_ += s.numel;
  slots_.push_back(s);
  return s.offset;
}

namespace {
// The chunks checked against the model (every layer in one chunk when none are given).
std::vector<LayerRange> checked_chunks(const GPTConfig& c, const StageSpec& stage) {
  if (stage.chunks.empty()) return {{0, c.n_layer}};
  int64_t prev = 0;
  for (const auto& r : stage.chunks) {
    PARALLM_CHECK(r.begin >= prev && r.begin < r.end && r.end <= c.n_layer, ConfigError, "model.params",
                  "a pipeline chunk of layers [{}, {}) is empty, overlaps the previous one or leaves the model's {} "
                  "layers",
                  r.begin, r.end, c.n_layer);
    prev = r.end;
  }
  return stage.chunks;
}
}  // namespace

size_t ParamLayout::held_blocks() const {
  return static_cast<size_t>(std::count_if(block_group_.begin(), block_group_.end(), [](int g) { return g >= 0; }));
}

namespace {
// Slots of block l, for each slot's whole-model index (its init stream).
int block_slots(const GPTConfig& c, int64_t l) {
  if (!c.llama()) return c.bias ? 12 : 6;
  const int attn = 6 + (c.attention_bias ? 3 : 0) + (c.qk_norm() ? 2 : 0);
  if (!c.moe_layer(l)) return attn + 3;
  return attn + 4 + (c.moe.bias ? 1 : 0) + (c.moe.shared > 0 ? 3 : 0);
}
}  // namespace

BlockParams ParamLayout::add_gpt2_block(const GPTConfig& c, const std::string& p) {
  using I = ParamSlot::Init;
  const int64_t C = c.n_embd;
  const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  // Megatron's split: c_attn and c_fc by output rows (column-parallel; c_attn's
  // q, k and v each by heads), the projections by input columns (row-parallel,
  // their biases whole).
  const Placement rows{0, 1}, qkv_rows{0, 3}, cols{1, 1}, whole{};
  BlockParams b{};
  auto bias = [&](const std::string& n, int64_t len, Placement pl, I init) -> int64_t {
    return c.bias ? add_part(p + n, {len}, pl, init, 0.0f, false) : -1;
  };
  b.ln1_w = add(p + "ln_1.weight", {C}, I::Ones, 0.0f, false);
  b.ln1_b = bias("ln_1.bias", C, whole, I::Zeros);
  b.qkv_w = add_part(p + "attn.c_attn.weight", {3 * C, C}, qkv_rows, I::Normal, std, true);
  b.qkv_b = bias("attn.c_attn.bias", 3 * C, qkv_rows, I::Zeros);
  b.proj_w = add_part(p + "attn.c_proj.weight", {C, C}, cols, I::Normal, proj_std, true);
  b.proj_b = bias("attn.c_proj.bias", C, whole, I::Zeros);
  b.ln2_w = add(p + "ln_2.weight", {C}, I::Ones, 0.0f, false);
  b.ln2_b = bias("ln_2.bias", C, whole, I::Zeros);
  b.fc_w = add_part(p + "mlp.c_fc.weight", {4 * C, C}, rows, I::Normal, std, true);
  b.fc_b = bias("mlp.c_fc.bias", 4 * C, rows, I::Zeros);
  b.fcproj_w = add_part(p + "mlp.c_proj.weight", {C, 4 * C}, cols, I::Normal, proj_std, true);
  b.fcproj_b = bias("mlp.c_proj.bias", C, whole, I::Zeros);
  return b;
}

BlockParams ParamLayout::add_llama_block(const GPTConfig& c, const std::string& p, bool moe) {
  using I = ParamSlot::Init;
  const int64_t C = c.n_embd, A = c.attn_width(), K = c.kv_heads() * c.head_size(), F = c.mlp_width();
  const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  // q, k, v, gate and up split by output rows (q, k, v by heads), o and down
  // by input columns; k and v whole on every rank where there are fewer KV
  // heads than ranks (each rank uses one of them; block_widths()).
  const Placement rows{0, 1}, cols{1, 1}, whole{};
  const Placement kv = block_widths(c, spec_.tp, spec_.rank).kv_whole ? whole : rows;
  BlockParams b{};
  b.ln1_b = b.qkv_b = b.proj_b = b.ln2_b = b.fc_b = b.fcproj_b = -1;
  auto bias = [&](const std::string& n, int64_t len, Placement pl) -> int64_t {
    return c.attention_bias ? add_part(p + n, {len}, pl, I::Zeros, 0.0f, false) : -1;
  };
  b.ln1_w = add(p + "input_layernorm.weight", {C}, I::Ones, 0.0f, false);
  b.qkv_w = add_part(p + "self_attn.q_proj.weight", {A, C}, rows, I::Normal, std, true);
  b.qkv_b = bias("self_attn.q_proj.bias", A, rows);
  b.k_w = add_part(p + "self_attn.k_proj.weight", {K, C}, kv, I::Normal, std, true);
  b.k_b = bias("self_attn.k_proj.bias", K, kv);
  b.v_w = add_part(p + "self_attn.v_proj.weight", {K, C}, kv, I::Normal, std, true);
  b.v_b = bias("self_attn.v_proj.bias", K, kv);
  if (c.qk_norm()) {
    b.q_norm = add(p + "self_attn.q_norm.weight", {c.head_size()}, I::Ones, 0.0f, false);
    b.k_norm = add(p + "self_attn.k_norm.weight", {c.head_size()}, I::Ones, 0.0f, false);
  }
  b.proj_w = add_part(p + "self_attn.o_proj.weight", {C, A}, cols, I::Normal, proj_std, true);
  b.ln2_w = add(p + "post_attention_layernorm.weight", {C}, I::Ones, 0.0f, false);
  if (moe) return add_moe_mlp(c, p, b);
  b.fc_w = add_part(p + "mlp.gate_proj.weight", {F, C}, rows, I::Normal, std, true);
  b.up_w = add_part(p + "mlp.up_proj.weight", {F, C}, rows, I::Normal, std, true);
  b.fcproj_w = add_part(p + "mlp.down_proj.weight", {C, F}, cols, I::Normal, proj_std, true);
  return b;
}

BlockParams ParamLayout::add_moe_mlp(const GPTConfig& c, const std::string& p, BlockParams b) {
  // The router (and its bias) whole on every rank; each expert split like a
  // dense MLP over tp (gate and up by its output rows, down by its input
  // columns), the shared experts likewise.
  using I = ParamSlot::Init;
  const int64_t C = c.n_embd, E = c.moe.experts, Fe = c.expert_width(), S = c.moe.shared * Fe;
  const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  const Placement rows{0, 1}, expert_rows{0, static_cast<int>(E), true}, expert_cols{1, 1, true}, cols{1, 1};
  b.router = add(p + "mlp.gate.weight", {E, C}, I::Normal, std, true);
  if (c.moe.bias) b.router_bias = add(p + "mlp.gate.e_score_correction_bias", {E}, I::Zeros, 0.0f, false);
  b.ex_gate = add_part(p + "mlp.experts.gate_proj.weight", {E * Fe, C}, expert_rows, I::Normal, std, true);
  b.ex_up = add_part(p + "mlp.experts.up_proj.weight", {E * Fe, C}, expert_rows, I::Normal, std, true);
  b.ex_down = add_part(p + "mlp.experts.down_proj.weight", {E * C, Fe}, expert_cols, I::Normal, proj_std, true);
  b.fc_w = b.up_w = b.fcproj_w = -1;
  if (S > 0) {
    b.fc_w = add_part(p + "mlp.shared_experts.gate_proj.weight", {S, C}, rows, I::Normal, std, true);
    b.up_w = add_part(p + "mlp.shared_experts.up_proj.weight", {S, C}, rows, I::Normal, std, true);
    b.fcproj_w = add_part(p + "mlp.shared_experts.down_proj.weight", {C, S}, cols, I::Normal, proj_std, true);
  }
  return b;
}

ParamLayout::ParamLayout(const GPTConfig& c, ShardSpec spec, StageSpec stage)
    : chunks_(checked_chunks(c, stage)), n_layer_(c.n_layer), spec_(spec) {
  using I = ParamSlot::Init;
  PARALLM_CHECK(spec.tp >= 1 && spec.rank >= 0 && spec.rank < spec.tp, ConfigError, "model.params",
                "tensor-parallel rank {} is outside a group of {}", spec.rank, spec.tp);
  PARALLM_CHECK(spec.ep >= 1 && spec.ep_rank >= 0 && spec.ep_rank < spec.ep &&
                    (spec.ep == 1 || (c.moe.experts > 0 && c.moe.experts % spec.ep == 0)),
                ConfigError, "model.params", "expert-parallel rank {} of {} for model.moe_experts={}", spec.ep_rank,
                spec.ep, c.moe.experts);
  block_widths(c, spec.tp, spec.rank);  // ConfigError where the heads or widths do not split
  first_ = chunks_.front().begin == 0;
  last_ = chunks_.back().end == c.n_layer;
  const int64_t C = c.n_embd;
  const bool llama = c.llama();
  const Placement rows{0, 1};
  // This rank's vocabulary rows (the token table's and an untied head's).
  const int64_t vn = (c.vocab_size + spec.tp - 1) / spec.tp;
  vocab_ = {spec.rank * vn, vn, std::clamp<int64_t>(c.vocab_size - spec.rank * vn, 0, vn)};
  if (first_ || (last_ && c.tie_embeddings)) {
    next_global_ = 0;
    wte_ = add_part(llama ? "model.embed_tokens.weight" : "transformer.wte.weight", {c.vocab_size, C}, rows, I::Normal,
                    0.02f, true);
    slots_.back().tied_copy = !first_;  // the last stage's head: a copy of the first stage's table
  }
  if (first_ && !llama) wpe_ = add("transformer.wpe.weight", {c.block_size, C}, I::Normal, 0.02f, true);
  blocks_.assign(static_cast<size_t>(c.n_layer), BlockParams{});
  block_group_.assign(static_cast<size_t>(c.n_layer), -1);
  const int head_slots = llama ? 1 : 2;
  std::vector<int> slot_base(static_cast<size_t>(c.n_layer) + 1, head_slots);  // each block's first slot index
  for (int64_t l = 0; l < c.n_layer; ++l)
    slot_base[static_cast<size_t>(l) + 1] = slot_base[static_cast<size_t>(l)] + block_slots(c, l);
  for (const auto& r : chunks_)
    for (int64_t l = r.begin; l < r.end; ++l) {
      next_global_ = slot_base[static_cast<size_t>(l)];
      const BlockParams b = llama ? add_llama_block(c, "model.layers." + std::to_string(l) + ".", c.moe_layer(l))
                                  : add_gpt2_block(c, "transformer.h." + std::to_string(l) + ".");
      blocks_[static_cast<size_t>(l)] = b;
      if (groups_.empty() && wte_ >= 0) groups_.push_back({0, b.ln1_w});  // the embeddings
      if (!groups_.empty()) groups_.back().end = b.ln1_w;
      block_group_[static_cast<size_t>(l)] = static_cast<int>(groups_.size());
      groups_.push_back({b.ln1_w, 0});
    }
  if (last_) {
    next_global_ = slot_base.back();
    lnf_w_ = add(llama ? "model.norm.weight" : "transformer.ln_f.weight", {C}, I::Ones, 0.0f, false);
    if (c.bias) lnf_b_ = add("transformer.ln_f.bias", {C}, I::Zeros, 0.0f, false);
    if (!c.tie_embeddings) lm_head_ = add_part("lm_head.weight", {c.vocab_size, C}, rows, I::Normal, 0.02f, true);
  }
  groups_.back().end = total_;
}

int64_t ParamLayout::max_group_size() const {
  int64_t m = 0;
  for (const auto& g : groups_) m = std::max(m, g.end - g.begin);
  return m;
}

int ParamLayout::unit_at(int64_t offset) const {
  auto it = std::lower_bound(slots_.begin(), slots_.end(), offset,
                             [](const ParamSlot& s, int64_t off) { return s.offset < off; });
  PARALLM_CHECK(it != slots_.end() && it->offset == offset, InternalError, "model.params",
                "no parameter starts at offset {}", offset);
  return static_cast<int>(it - slots_.begin());
}

const ParamSlot& ParamLayout::find(const std::string& name) const {
  for (const auto& s : slots_)
    if (s.name == name) return s;
  throw ConfigError("model.params", fmt::format("no parameter named \"{}\"", name));
}

}  // namespace parallm::model
