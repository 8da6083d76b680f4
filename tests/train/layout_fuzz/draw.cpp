// Drawing a case: the model fitted to the first layout, the resumed layout by
// rejection, the options of each, and the invalid variant (invalid.cpp).
#include "train/layout_fuzz/draw.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "train/layout_fuzz/corpus.h"

namespace layout_fuzz {

uint64_t Rng::next() {
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
int Rng::below(int n) {
  return n <= 1 ? 0 : static_cast<int>(next() % static_cast<uint64_t>(n));
}
int Rng::in(int lo, int hi) {
  return hi <= lo ? lo : lo + below(hi - lo + 1);
}
bool Rng::chance(double p) {
  return static_cast<double>(next() >> 11) * 0x1p-53 < p;
}

namespace {

constexpr int kMaxWorld = 8;

// Every (dp, tp, pp, cp) whose product is `world`, dp fastest.
std::vector<Layout> factorizations(int world) {
  std::vector<Layout> out;
  for (int tp = 1; tp <= world; ++tp)
    for (int pp = 1; pp <= world; ++pp)
      for (int cp = 1; cp <= world; ++cp)
        if (world % (tp * pp * cp) == 0) {
          Layout l;
          l.world = world;
          l.tp = tp;
          l.pp = pp;
          l.cp = cp;
          l.dp = world / (tp * pp * cp);
          out.push_back(l);
        }
  return out;
}

// A composition of n into k positive parts, at random.
std::vector<int> composition(Rng& r, int n, int k) {
  std::vector<int> parts(static_cast<size_t>(k), 1);
  for (int left = n - k; left > 0; --left) ++parts[static_cast<size_t>(r.below(k))];
  return parts;
}

// The degrees and the axis options (cp kind, sequence parallelism, the
// pipeline's schedule, chunks and stage sizes). `n_layer` <= 0: drawn here to
// fit the stages (the first layout), else the model's (the resumed one).
Layout draw_axes(Rng& r, int& n_layer, int world) {
  Layout l = r.pick(factorizations(world));
  l.cp_kind = r.chance(0.5) ? "ring" : "ulysses";
  l.sp = l.tp > 1 && l.cp == 1 && r.chance(0.5);
  if (l.pp > 1) {
    l.schedule = r.pick(std::vector<std::string>{"gpipe", "1f1b", "interleaved", "zb-h1"});
    if (l.schedule == "interleaved") l.virt = r.in(2, n_layer > 0 ? std::max(2, n_layer / l.pp) : 3);
  }
  const int stages = l.pp * l.virt;
  if (n_layer <= 0) n_layer = r.in(stages, std::max(4, stages));
  if (l.pp > 1 && r.chance(0.4) && n_layer >= stages) l.pp_layers = composition(r, n_layer, stages);
  return l;
}

// ZeRO, the deterministic reduction, recomputation and buckets, within the rules.
void draw_options(Rng& r, Layout& l) {
  l.zero = l.pp > 1 ? r.in(0, 1) : r.in(0, 3);
  if (l.zero > 0) {
    std::vector<std::string> offloads = {"none", "none", "optimizer"};
    if (l.zero == 3) offloads.push_back("params");
    l.offload = r.pick(offloads);
  }
  l.prefetch = r.in(0, 2);
  l.deterministic = l.pp == 1 && l.cp == 1 && l.zero == 0 && r.chance(0.35);
  if (l.deterministic && r.chance(0.5)) {
    if (l.dp > 1) {
      l.shards = l.dp;
    } else {
      std::vector<int> divisors;
      for (int d = 1; d <= l.batch; ++d)
        if (l.batch % d == 0) divisors.push_back(d);
      l.shards = r.pick(divisors);
    }
  }
  const bool zb = l.pp > 1 && l.schedule == "zb-h1";
  l.recompute = zb ? "none" : r.pick(std::vector<std::string>{"none", "selective", "full"});
  l.bucket_mb = r.pick(std::vector<double>{0.001, 0.01, 25});
}

int lcm(int a, int b) {
  return a / std::gcd(a, b) * b;
}

bool is_prime(int n) {
  if (n < 2) return false;
  for (int d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

// The model, fitted to the first layout's axes.
Model draw_model(Rng& r, const Layout& a, int n_layer) {
  Model m;
  m.n_layer = n_layer;
  const int heads_unit = a.tp * (a.cp > 1 && a.cp_kind == "ulysses" ? a.cp : 1);
  m.n_head = heads_unit * r.in(1, std::max(1, 8 / heads_unit));
  std::vector<int> widths;
  for (int c = 16; c <= 48; ++c)
    if (c % m.n_head == 0) widths.push_back(c);
  m.n_embd = r.pick(widths);
  int unit = a.sp ? a.tp : 1;
  if (a.cp > 1) unit = lcm(unit, a.cp_kind == "ring" ? 2 * a.cp : a.cp);
  std::vector<int> blocks;
  for (int t = 16; t <= 64; ++t)
    if (t % unit == 0) blocks.push_back(t);
  m.block_size = r.pick(blocks);
  std::vector<int> primes;  // above the dataset's vocabulary: no degree divides it
  for (int v = corpus_vocab() + 1; v <= corpus_vocab() + 40; ++v)
    if (is_prime(v)) primes.push_back(v);
  m.vocab_size = r.pick(primes);
  m.bias = r.chance(0.5);
  m.dropout = r.pick(std::vector<double>{0.0, 0.1, 0.1, 0.2});
  m.gelu = r.chance(0.5) ? "tanh" : "exact";
  m.tied = r.chance(0.75);
  m.arch = r.pick(std::vector<std::string>{"gpt2", "gpt2", "llama", "qwen3"});
  if (m.arch == "gpt2") return m;
  std::vector<int> kv;  // KV heads the first layout's tp splits or replicates
  for (int k = 1; k <= m.n_head; ++k)
    if (m.n_head % k == 0 && (k % a.tp == 0 || a.tp % k == 0)) kv.push_back(k);
  m.n_kv_head = r.pick(kv);
  m.head_dim = r.pick(std::vector<int>{2, 4, 6, 8});
  m.intermediate = m.n_head * r.in(3, 8);  // tp divides the heads, so it divides this
  m.rope_scaling = r.chance(0.5);
  return m;
}

Training draw_training(Rng& r, const Layout& a) {
  Training t;
  t.gas = a.pp > 1 && a.schedule == "interleaved" ? a.pp * r.in(1, 2) : r.in(1, 4);
  t.global_batch = a.dp * a.batch;
  t.weight_decay = r.pick(std::vector<double>{0.0, 0.1});
  t.grad_clip = r.pick(std::vector<double>{0.0, 1.0, 0.05});  // 0.05 clips: the global norm scales the update
  t.beta2 = r.pick(std::vector<double>{0.95, 0.99});
  t.loss_scale = r.pick(std::vector<std::string>{"off", "off", "1024", "dynamic"});  // exact scaling, every layout
  t.seed = static_cast<uint64_t>(r.in(0, 999999));
  return t;
}

// "3,1,2"
std::string join(const std::vector<int>& v) {
  std::string s;
  for (const int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

bool same(const Layout& a, const Layout& b) {
  return describe(a) == describe(b);
}

}  // namespace

bool valid(const Model& m, const Training& t, const Layout& l, std::string* why) {
  auto no = [&](std::string s) {
    if (why) *why = std::move(s);
    return false;
  };
  if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.cp < 1 || l.world != l.dp * l.tp * l.pp * l.cp)
    return no("world != dp x tp x pp x cp");
  if (l.dp * l.batch != t.global_batch) return no("dp x batch != the global batch");
  if (m.n_head % l.tp != 0) return no("tp does not divide the heads");
  if (m.arch != "gpt2" && m.n_kv_head % l.tp != 0 && l.tp % m.n_kv_head != 0)
    return no("tp neither splits nor replicates the KV heads");
  if (l.sp && (l.tp == 1 || m.block_size % l.tp != 0 || l.cp > 1)) return no("sequence parallelism");
  if (l.virt > 1 && l.schedule != "interleaved") return no("pp_virtual without interleaved");
  if (l.pp == 1 && (!l.pp_layers.empty() || l.virt > 1)) return no("pipeline keys without a pipeline");
  if (l.pp > 1) {
    const int stages = l.pp * l.virt;
    if (stages > m.n_layer) return no("more stages than layers");
    if (!l.pp_layers.empty() && (static_cast<int>(l.pp_layers.size()) != stages ||
                                 std::accumulate(l.pp_layers.begin(), l.pp_layers.end(), 0) != m.n_layer))
      return no("pp_layers");
    if (l.zero >= 2 || l.deterministic) return no("pipeline with ZeRO 2/3 or deterministic");
    if (l.schedule == "zb-h1" && l.recompute != "none") return no("zb-h1 with recompute");
    if (l.schedule == "interleaved" && (l.virt < 2 || t.gas % l.pp != 0)) return no("interleaved shape");
  }
  if (l.cp > 1) {
    if (l.cp_kind == "ring" && m.block_size % (2 * l.cp) != 0) return no("ring: block % 2cp");
    if (l.cp_kind == "ulysses" && (m.block_size % l.cp != 0 || (m.n_head / l.tp) % l.cp != 0))
      return no("ulysses: block or heads");
    if (l.deterministic) return no("deterministic with cp");
  }
  if (l.shards != 0 && !l.deterministic) return no("shards without deterministic");
  if (l.deterministic && l.dp > 1 && l.shards != 0 && l.shards != l.dp) return no("shards != dp");
  if (l.deterministic && l.dp == 1 && l.batch % std::max(l.shards, 1) != 0) return no("shards do not divide batch");
  if (l.offload != "none" && l.zero == 0) return no("offload without ZeRO");
  if (l.offload == "params" && l.zero != 3) return no("offload params below stage 3");
  if (l.zero > 0 && l.deterministic) return no("ZeRO with deterministic");
  return true;
}

namespace {
// Half the Llama-family cases become mixtures of experts, drawn from a stream of their own (every other draw of
// a case stays as it was); their layouts then run without recompute and the deterministic reduction (MoE takes
// neither yet), which keeps them valid.
void draw_moe(uint64_t seed, Case& c) {
  Model& m = c.model;
  Rng r(seed ^ 0x6D6F652D64726177ull);  // "moe-draw"
  if (m.arch == "gpt2" || !r.chance(0.5)) return;
  for (Layout* l : {&c.first, &c.resumed}) {
    l->recompute = "none";
    l->deterministic = false;
    l->shards = 0;
  }
  // The invalid draw's layout likewise, unless its broken rule is about those keys.
  Invalid& v = c.invalid;
  const auto names = [&](const std::string& key) {
    return std::find(v.names.begin(), v.names.end(), key) != v.names.end();
  };
  for (std::string& k : v.keys) {
    if (k.rfind("model.recompute=", 0) == 0 && !names("model.recompute")) k = "model.recompute=none";
    if (k.rfind("ddp.shards=", 0) == 0 && !names("ddp.shards")) k = "ddp.shards=0";
    if (k.rfind("ddp.deterministic=", 0) == 0 && !names("ddp.deterministic") && !names("ddp.shards"))
      k = "ddp.deterministic=false";
  }
  m.moe_experts = r.pick(std::vector<int>{2, 3, 4, 8});
  m.moe_top_k = r.in(1, std::min(m.moe_experts, 3));
  m.moe_intermediate = m.n_head * r.in(1, 4);  // tp divides the heads, so it divides this
  m.moe_shared = r.pick(std::vector<int>{0, 0, 1});
  m.moe_score = r.chance(0.5) ? "softmax" : "sigmoid";
  m.moe_aux = r.pick(std::vector<double>{0.0, 0.01});
  m.moe_z = r.pick(std::vector<double>{0.0, 0.001});
  m.moe_first = m.n_layer > 1 ? r.in(0, 1) : 0;
  m.moe_every = r.in(1, 2);
  // A capacity factor where no layout of the case (the invalid draw's included) splits sequences over cp.
  const bool cp_anywhere =
      c.first.cp > 1 || c.resumed.cp > 1 || std::any_of(v.keys.begin(), v.keys.end(), [](const std::string& k) {
        return k.rfind("parallel.cp=", 0) == 0 && k != "parallel.cp=1";
      });
  if (!cp_anywhere && r.chance(0.3)) m.moe_capacity = r.pick(std::vector<double>{1.0, 1.5});
  // DeepSeek's bias update where no layout (the invalid draw's included) keeps its parameters sharded or offloaded.
  const auto stored = [](const Layout& l) { return l.zero == 3 || l.offload != "none"; };
  const bool sharded_anywhere =
      stored(c.first) || stored(c.resumed) || std::any_of(v.keys.begin(), v.keys.end(), [](const std::string& k) {
        return k == "zero.stage=3" || (k.rfind("zero.offload=", 0) == 0 && k != "zero.offload=none");
      });
  if (!sharded_anywhere && r.chance(0.3)) m.moe_bias_rate = 0.01;
  // Expert parallelism (with DDP or any ZeRO stage): any degree dividing both dp x cp and the experts.
  for (Layout* l : {&c.first, &c.resumed}) {
    std::vector<int> eps;
    for (int e = 2; e <= l->dp * l->cp; ++e)
      if ((l->dp * l->cp) % e == 0 && m.moe_experts % e == 0) eps.push_back(e);
    if (!eps.empty() && r.chance(0.6)) l->ep = r.pick(eps);
  }
}
}  // namespace

Case draw_case(uint64_t seed) {
  Rng r(seed ^ 0x6C61796F75742D66ull);  // "layout-f": case seeds 0, 1, 2 are not SplitMix's own first states
  Case c;
  c.seed = seed;
  int n_layer = 0;
  Layout a = draw_axes(r, n_layer, r.in(1, kMaxWorld));  // the first layout's axes, then a model that fits them
  c.model = draw_model(r, a, n_layer);
  a.batch = r.in(1, 3);
  draw_options(r, a);
  c.train = draw_training(r, a);
  c.first = a;
  std::string why;
  if (!valid(c.model, c.train, a, &why))  // a bug of the drawing, not of parallm
    throw std::logic_error(fmt::format("case {}: the first layout drawn is invalid ({}): {}", seed, why, describe(a)));
  c.resumed.batch = c.train.global_batch;  // one rank, should no other layout fit
  // The resumed layout: any valid one but the first. A world size first, uniformly, then draws at that size
  // (rejection over the whole space at once would favour one rank, valid for every model).
  std::vector<int> worlds(kMaxWorld);
  std::iota(worlds.begin(), worlds.end(), 1);
  for (bool found = false; !found && !worlds.empty();) {
    const size_t w = static_cast<size_t>(r.below(static_cast<int>(worlds.size())));
    for (int tries = 0; tries < 400 && !found; ++tries) {
      int layers = c.model.n_layer;
      Layout b = draw_axes(r, layers, worlds[w]);
      if (c.train.global_batch % b.dp != 0) continue;
      b.batch = c.train.global_batch / b.dp;
      draw_options(r, b);
      if (valid(c.model, c.train, b) && !same(a, b)) c.resumed = b, found = true;
    }
    worlds.erase(worlds.begin() + static_cast<std::ptrdiff_t>(w));
  }
  c.invalid = draw_invalid(r, c);
  draw_moe(seed, c);
  return c;
}

std::vector<std::string> layout_keys(const Layout& l) {
  const std::string layers = join(l.pp_layers);
  auto b = [](bool v) { return v ? "true" : "false"; };
  return {fmt::format("parallel.dp={}", l.dp),
          fmt::format("parallel.tp={}", l.tp),
          fmt::format("parallel.pp={}", l.pp),
          fmt::format("parallel.cp={}", l.cp),
          "parallel.cp_kind=" + l.cp_kind,
          fmt::format("parallel.sequence_parallel={}", b(l.sp)),
          "parallel.pp_schedule=" + l.schedule,
          fmt::format("parallel.pp_virtual={}", l.virt),
          "parallel.pp_layers=" + layers,
          "parallel.tp_across_nodes=false",
          fmt::format("zero.stage={}", l.zero),
          "zero.offload=" + l.offload,
          fmt::format("zero.prefetch={}", l.prefetch),
          fmt::format("ddp.deterministic={}", b(l.deterministic)),
          fmt::format("ddp.shards={}", l.shards),
          fmt::format("ddp.bucket_mb={}", l.bucket_mb),
          fmt::format("model.batch_size={}", l.batch),
          "model.recompute=" + l.recompute,
          fmt::format("parallel.ep={}", l.ep)};
}

std::vector<std::string> model_keys(const Model& m, const Training& t) {
  std::vector<std::string> k = common_model_keys(m, t);
  if (m.arch == "gpt2") return k;
  k.insert(k.end(),
           {"model.arch=" + m.arch, fmt::format("model.n_kv_head={}", m.n_kv_head),
            fmt::format("model.head_dim={}", m.head_dim), fmt::format("model.intermediate_size={}", m.intermediate),
            "model.bias=false", fmt::format("model.attention_bias={}", m.bias ? "true" : "false"),
            m.rope_scaling ? "model.rope_scaling=llama3" : "model.rope_scaling=none",
            "model.rope_original_max_position_embeddings=16"});
  if (m.moe_experts == 0) return k;
  k.insert(k.end(),
           {fmt::format("model.moe_experts={}", m.moe_experts), fmt::format("model.moe_top_k={}", m.moe_top_k),
            fmt::format("model.moe_intermediate_size={}", m.moe_intermediate),
            fmt::format("model.moe_shared_experts={}", m.moe_shared), "model.moe_score=" + m.moe_score,
            fmt::format("model.moe_aux_coef={}", m.moe_aux), fmt::format("model.moe_z_coef={}", m.moe_z),
            fmt::format("model.moe_first_layer={}", m.moe_first), fmt::format("model.moe_every={}", m.moe_every),
            fmt::format("model.moe_capacity_factor={}", m.moe_capacity),
            fmt::format("model.moe_bias={}", m.moe_bias_rate > 0 ? "true" : "false"),
            fmt::format("model.moe_bias_update_rate={}", m.moe_bias_rate)});
  return k;
}

std::vector<std::string> common_model_keys(const Model& m, const Training& t) {
  return {fmt::format("model.n_layer={}", m.n_layer),
          fmt::format("model.n_head={}", m.n_head),
          fmt::format("model.n_embd={}", m.n_embd),
          fmt::format("model.block_size={}", m.block_size),
          fmt::format("model.vocab_size={}", m.vocab_size),
          fmt::format("model.bias={}", m.bias ? "true" : "false"),
          fmt::format("model.tie_embeddings={}", m.tied ? "true" : "false"),
          fmt::format("model.dropout={}", m.dropout),
          "model.gelu=" + m.gelu,
          fmt::format("optimizer.gas={}", t.gas),
          fmt::format("optimizer.learning_rate={}", t.lr),
          fmt::format("optimizer.min_lr={}", t.lr / 10),
          "optimizer.warmup_iters=2",
          "optimizer.lr_decay_iters=20",
          fmt::format("optimizer.weight_decay={}", t.weight_decay),
          fmt::format("optimizer.grad_clip={}", t.grad_clip),
          fmt::format("optimizer.beta2={}", t.beta2),
          fmt::format("optimizer.eps={}", t.eps),
          "train.loss_scale=" + t.loss_scale,
          fmt::format("train.seed={}", t.seed)};
}

std::string describe(const Layout& l) {
  std::string s = fmt::format("W={} dp={} tp={}{} pp={}", l.world, l.dp, l.tp, l.sp ? "+sp" : "", l.pp);
  if (l.pp > 1) {
    s += fmt::format("({}", l.schedule);
    if (l.virt > 1) s += fmt::format(" v={}", l.virt);
    if (!l.pp_layers.empty()) s += " layers=" + join(l.pp_layers);
    s += ")";
  }
  s += fmt::format(" cp={}", l.cp);
  if (l.cp > 1) s += "(" + l.cp_kind + ")";
  s += fmt::format(" zero={}", l.zero);
  if (l.offload != "none") s += "+offload_" + l.offload;
  if (l.zero == 3) s += fmt::format("(prefetch {})", l.prefetch);
  if (l.deterministic) s += fmt::format(" det(shards {})", l.shards);
  if (l.recompute != "none") s += " recompute=" + l.recompute;
  s += fmt::format(" bucket={} B={}", l.bucket_mb, l.batch);
  if (l.ep > 1) s += fmt::format(" ep={}", l.ep);
  return s;
}

std::string describe(const Model& m, const Training& t) {
  std::string arch = m.arch;
  if (m.arch != "gpt2")
    arch +=
        fmt::format("(KV={} D={} F={}{})", m.n_kv_head, m.head_dim, m.intermediate, m.rope_scaling ? " llama3" : "");
  if (m.moe_experts > 0)
    arch += fmt::format(" moe(E={} k={} Fe={} shared={} {} aux={} z={} layers {}+{}k{})", m.moe_experts, m.moe_top_k,
                        m.moe_intermediate, m.moe_shared, m.moe_score, m.moe_aux, m.moe_z, m.moe_first, m.moe_every,
                        (m.moe_capacity > 0 ? fmt::format(" capacity {}", m.moe_capacity) : "") +
                            (m.moe_bias_rate > 0 ? fmt::format(" bias update {}", m.moe_bias_rate) : ""));
  return fmt::format(
      "{} L={} H={} C={} T={} V={} bias={} tied={} dropout={} gelu={} gas={} global_batch={} lr={} wd={} clip={} "
      "loss_scale={}",
      arch, m.n_layer, m.n_head, m.n_embd, m.block_size, m.vocab_size, m.bias ? 1 : 0, m.tied ? 1 : 0, m.dropout,
      m.gelu, t.gas, t.global_batch, t.lr, t.weight_decay, t.grad_clip, t.loss_scale);
}

}  // namespace layout_fuzz
