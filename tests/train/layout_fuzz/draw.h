// The layout fuzzer's drawing half (issue 44): from a case's seed, a tiny
// model and training setup, a valid parallel layout to train it with, a
// second valid layout to resume it with, and one invalid variant that
// `parallm train` must refuse with a ConfigError naming a key.
//
// A case is a pure function of its seed (SplitMix64, no global state), so
// `layout_fuzz --seed S` redraws it exactly. The model is drawn to fit the
// first layout (heads a multiple of tp, or of tp x cp under Ulysses; enough
// layers for the pipeline's stages; a block the sequence splits divide), the
// vocabulary is padded to a prime above the dataset's, so that no degree
// divides it. The resumed layout is drawn by rejection over the whole space
// with the model, optimizer.gas and the global micro-batch (dp x
// model.batch_size) held fixed: what the one-rank reference needs to see the
// same samples and dropout masks (data/loader.h numbers a step's samples by
// micro-step, then dp rank, then row; the masks follow the global sample and
// micro-step). valid() mirrors the layout rules of train/config/config.cpp, the
// mesh, the pipeline shape and the deterministic reduction; a draw it calls
// valid that parallm refuses is reported as a failure too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace layout_fuzz {

// SplitMix64: small, fast, and the same sequence on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next();
  int below(int n);        // [0, n)
  int in(int lo, int hi);  // [lo, hi]
  bool chance(double p);   // true with probability p
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(below(static_cast<int>(v.size())))];
  }

 private:
  uint64_t s_;
};

// What stays fixed across a case's runs: the architecture and the training.
struct Model {
  int n_layer = 2, n_head = 2, n_embd = 32, block_size = 32, vocab_size = 67;
  bool bias = true;
  bool tied = true;  // model.tie_embeddings
  double dropout = 0.1;
  std::string gelu = "tanh";
  // The Llama family (arch llama or qwen3; bias then means q/k/v biases).
  std::string arch = "gpt2";
  int n_kv_head = 0, head_dim = 0, intermediate = 0;
  bool rope_scaling = false;
  // A mixture of experts (Llama family; 0 experts: dense), drawn apart (draw_moe) where both layouts take it.
  int moe_experts = 0, moe_top_k = 1, moe_intermediate = 0, moe_shared = 0, moe_first = 0, moe_every = 1;
  std::string moe_score = "softmax";
  double moe_aux = 0, moe_z = 0;
  double moe_capacity = 0;   // 0: dropless (a capacity only where neither layout splits sequences over cp)
  double moe_bias_rate = 0;  // > 0: the selection bias on and moved each step (no ZeRO 3 or offload anywhere)
};
struct Training {
  int gas = 1;           // optimizer.gas
  int global_batch = 4;  // samples per micro-step over all data-parallel ranks (dp x model.batch_size)
  int iters1 = 3;        // the first leg trains iterations 0..iters1
  int iters2 = 6;        // the resumed leg iters1 + 1..iters2
  double lr = 1e-3, weight_decay = 0.1, grad_clip = 0, beta2 = 0.99;
  // AdamW's eps: 1e-6, not the default 1e-8, under which an element whose gradient is a cancellation at rounding
  // level (|g| ~ 1e-9) moves by lr x |g| / (|g| + eps), up to 0.3 lr, differently for every summation order (seed
  // 351: 2.1e-5 in grad_norm at tp 6, and 5.3e-6 on one rank that only split its batch, ddp.shards=2).
  double eps = 1e-6;
  std::string loss_scale = "off";  // train.loss_scale: off, a static power of two, or dynamic
  uint64_t seed = 1;
};
struct Layout {
  int world = 1, dp = 1, tp = 1, pp = 1, cp = 1;
  std::string cp_kind = "ring";
  bool sp = false;
  std::string schedule = "1f1b";
  int virt = 1;
  std::vector<int> pp_layers;  // empty: even
  int zero = 0, prefetch = 1;
  std::string offload = "none";
  bool deterministic = false;
  int shards = 0;
  std::string recompute = "none";
  double bucket_mb = 25;
  int batch = 4;  // model.batch_size (per dp rank)
  int ep = 1;     // expert parallel (MoE models, DDP: inside dp x cp)
};

// An invalid draw: the keys given, the ranks launched, and a key the error must name.
struct Invalid {
  std::string what;  // the rule broken, in words
  int world = 1;
  std::vector<std::string> keys;        // the layout's key=value, as given
  std::vector<std::string> model_over;  // replacing some of the model's and training's key=value
  std::vector<std::string> names;       // the error must name one of these keys
  bool on_resume = false;               // given to a resume of the first leg's checkpoint
};

struct Case {
  uint64_t seed = 0;
  Model model;
  Training train;
  Layout first, resumed;
  Invalid invalid;
};

// Draws case `seed` (deterministic).
Case draw_case(uint64_t seed);
// The case's invalid variant (invalid.cpp): one rule of the layout broken.
Invalid draw_invalid(Rng& r, const Case& c);

// Whether parallm accepts `l` for this model and training; why not, in words, in `why`.
bool valid(const Model& m, const Training& t, const Layout& l, std::string* why = nullptr);

// key=value for every key a layout sets (all of parallel.*, zero.*, ddp.*,
// model.batch_size and model.recompute: a resume is always given them all).
std::vector<std::string> layout_keys(const Layout& l);
// key=value for the model and the training (without the iteration count and directories).
std::vector<std::string> model_keys(const Model& m, const Training& t);
// The keys every family shares (model_keys adds the Llama family's).
std::vector<std::string> common_model_keys(const Model& m, const Training& t);
// `keys` with each key=value of `over` replacing the entry of its key (or appended).
std::vector<std::string> with_overrides(std::vector<std::string> keys, const std::vector<std::string>& over);
// "W=4 dp=2 tp=2 sp pp=1 ...": a layout in one line.
std::string describe(const Layout& l);
std::string describe(const Model& m, const Training& t);

}  // namespace layout_fuzz
