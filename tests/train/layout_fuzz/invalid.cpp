// Invalid draws: one rule of a valid layout broken at a time (the rules of
// train/config/config.cpp, the mesh, the pipeline's shape, the deterministic
// reduction, and keys' ranges and choices), on the first layout (a scratch
// run: its directory must not appear) or on the resumed one (a resume of the
// first leg's checkpoint: the directory must not change). Each mutation says
// which keys the ConfigError may name; the runner checks that it names one.
#include <fmt/format.h>

#include <functional>
#include <numeric>
#include <utility>

#include "train/layout_fuzz/draw.h"

namespace layout_fuzz {

namespace {

constexpr int kMaxWorld = 8;

struct Mutation {
  Layout l;                             // the layout broken
  std::vector<std::string> overrides;   // raw key=value on top of its keys (values no layout holds)
  std::vector<std::string> model_over;  // on top of the model and training keys
  std::vector<std::string> names;       // keys the error may name
  std::string what;
};
using Mutator = std::function<bool(Rng&, const Case&, Mutation&)>;

int degrees(const Layout& l) {
  return l.dp * l.tp * l.pp * l.cp;
}

// A degree in [2, 8] for which `bad` holds and the world stays at most 8 ranks; 0 if none.
int pick_degree(Rng& r, int others, const std::function<bool(int)>& bad) {
  std::vector<int> ok;
  for (int d = 2; d <= kMaxWorld; ++d)
    if (others * d <= kMaxWorld && bad(d)) ok.push_back(d);
  return ok.empty() ? 0 : r.pick(ok);
}

// A layout without a pipeline's or ZeRO's constraints in the way of another rule.
void plain(Layout& l) {
  l.schedule = "1f1b";
  l.virt = 1;
  l.pp_layers.clear();
}

using Mutators = std::vector<std::pair<std::string, Mutator>>;

// The mesh's degrees against the world and the model.
void add_degree_mutators(Mutators& v) {
  v.push_back({"tp does not divide the heads", [](Rng& r, const Case& c, Mutation& m) {
                 const int t = pick_degree(r, degrees(m.l) / m.l.tp, [&](int d) { return c.model.n_head % d != 0; });
                 if (!t) return false;
                 m.l.tp = t;
                 m.names = {"parallel.tp", "model.n_head"};
                 return true;
               }});
  v.push_back({"ranks != dp x tp x pp x cp", [](Rng& r, const Case&, Mutation& m) {
                 int w = r.in(1, kMaxWorld - 1);
                 m.l.world = w >= m.l.world ? w + 1 : w;
                 m.names = {"parallel.dp", "parallel.tp"};
                 return true;
               }});
  v.push_back({"ranks not divisible by tp x pp x cp", [](Rng& r, const Case&, Mutation& m) {
                 const int tpc = m.l.tp * m.l.pp * m.l.cp;
                 std::vector<int> ws;
                 for (int w = 1; w <= kMaxWorld; ++w)
                   if (w % tpc != 0) ws.push_back(w);
                 if (ws.empty()) return false;
                 m.l.world = r.pick(ws);
                 m.overrides = {"parallel.dp=0"};
                 m.names = {"parallel.tp"};
                 return true;
               }});
  v.push_back({"sequence parallelism without tp or with cp", [](Rng&, const Case&, Mutation& m) {
                 if (m.l.tp > 1 && m.l.cp == 1) return false;
                 m.l.sp = true;
                 m.names = {"parallel.sequence_parallel"};
                 return true;
               }});
  v.push_back({"sequence parallelism with a tp not dividing the block", [](Rng& r, const Case& c, Mutation& m) {
                 if (m.l.cp > 1) return false;
                 const int t = pick_degree(r, degrees(m.l) / m.l.tp, [&](int d) {
                   return c.model.n_head % d == 0 && c.model.block_size % d != 0;
                 });
                 if (!t) return false;
                 m.l.tp = t;
                 m.l.sp = true;
                 m.names = {"parallel.sequence_parallel"};
                 return true;
               }});
  v.push_back({"ring cp not dividing the block in 2 cp chunks", [](Rng& r, const Case& c, Mutation& m) {
                 const int k =
                     pick_degree(r, degrees(m.l) / m.l.cp, [&](int d) { return c.model.block_size % (2 * d); });
                 if (!k) return false;
                 m.l.cp = k;
                 m.l.cp_kind = "ring";
                 m.l.sp = false;
                 m.names = {"parallel.cp", "model.block_size"};
                 return true;
               }});
  v.push_back({"Ulysses cp not dividing the heads per tp rank", [](Rng& r, const Case& c, Mutation& m) {
                 const int k = pick_degree(r, degrees(m.l) / m.l.cp, [&](int d) {
                   return c.model.block_size % d == 0 && (c.model.n_head / m.l.tp) % d != 0;
                 });
                 if (!k) return false;
                 m.l.cp = k;
                 m.l.cp_kind = "ulysses";
                 m.l.sp = false;
                 m.names = {"parallel.cp", "model.n_head"};
                 return true;
               }});
}

// The pipeline's keys against the model, each other and ZeRO.
void add_pipeline_mutators(Mutators& v) {
  v.push_back({"pp_layers not adding up to the layers", [](Rng& r, const Case& c, Mutation& m) {
                 const int stages = m.l.pp * m.l.virt, n = c.model.n_layer + (r.chance(0.5) ? 1 : -1);
                 if (n < stages) return false;
                 m.l.pp_layers.assign(static_cast<size_t>(stages), 1);
                 for (int left = n - stages; left > 0; --left) ++m.l.pp_layers[static_cast<size_t>(r.below(stages))];
                 m.names = {"parallel.pp_layers"};
                 return true;
               }});
  v.push_back({"pp_layers with a count per stage too many", [](Rng&, const Case& c, Mutation& m) {
                 const int stages = m.l.pp * m.l.virt;
                 if (c.model.n_layer < stages + 1) return false;
                 m.l.pp_layers.assign(static_cast<size_t>(stages + 1), 1);
                 m.l.pp_layers.back() += c.model.n_layer - stages - 1;
                 m.names = {"parallel.pp_layers"};
                 return true;
               }});
  v.push_back({"more pipeline stages than layers", [](Rng& r, const Case& c, Mutation& m) {
                 const int p = pick_degree(r, degrees(m.l) / m.l.pp, [&](int d) { return d > c.model.n_layer; });
                 if (!p) return false;
                 plain(m.l);
                 m.l.pp = p;
                 m.l.zero = std::min(m.l.zero, 1);
                 m.l.offload = "none";
                 m.l.deterministic = false;
                 m.l.shards = 0;
                 m.names = {"parallel.pp", "model.n_layer"};
                 return true;
               }});
  v.push_back({"ZeRO 2 or 3 with a pipeline", [](Rng& r, const Case&, Mutation& m) {
                 if (m.l.pp == 1) return false;
                 m.l.zero = r.in(2, 3);
                 m.l.offload = "none";
                 m.names = {"zero.stage"};
                 return true;
               }});
  v.push_back({"deterministic DDP with pp, cp or ZeRO", [](Rng&, const Case&, Mutation& m) {
                 if (m.l.pp == 1 && m.l.cp == 1 && m.l.zero == 0) return false;
                 m.l.deterministic = true;
                 m.l.shards = 0;
                 m.names = {"ddp.deterministic"};
                 return true;
               }});
  v.push_back({"pp_virtual without the interleaved schedule", [](Rng& r, const Case&, Mutation& m) {
                 if (m.l.schedule == "interleaved" && m.l.pp > 1) return false;
                 m.l.virt = r.in(2, 3);
                 m.l.pp_layers.clear();
                 m.names = {"parallel.pp_virtual"};
                 return true;
               }});
  v.push_back({"interleaved with optimizer.gas not a multiple of pp", [](Rng& r, const Case& c, Mutation& m) {
                 if (m.l.pp == 1 || m.l.schedule != "interleaved") return false;
                 int g = r.in(1, 2 * m.l.pp);
                 if (g % m.l.pp == 0) ++g;
                 m.model_over = {fmt::format("optimizer.gas={}", g)};
                 (void)c;
                 m.names = {"optimizer.gas"};
                 return true;
               }});
  v.push_back({"zb-h1 with recomputation", [](Rng& r, const Case&, Mutation& m) {
                 if (m.l.pp == 1) return false;
                 plain(m.l);
                 m.l.schedule = "zb-h1";
                 m.l.recompute = r.chance(0.5) ? "full" : "selective";
                 m.names = {"model.recompute"};
                 return true;
               }});
}

// ZeRO's offload, the deterministic reduction's shards, and keys' ranges and choices.
void add_option_mutators(Mutators& v) {
  v.push_back({"offload without a sharded ZeRO stage", [](Rng&, const Case&, Mutation& m) {
                 m.l.zero = 0;
                 m.l.offload = "optimizer";
                 m.names = {"zero.offload"};
                 return true;
               }});
  v.push_back({"offload of parameters below ZeRO 3", [](Rng& r, const Case&, Mutation& m) {
                 m.l.zero = m.l.pp > 1 ? 1 : r.in(1, 2);
                 m.l.offload = "params";
                 m.l.deterministic = false;
                 m.l.shards = 0;
                 m.names = {"zero.offload"};
                 return true;
               }});
  v.push_back({"ddp.shards without ddp.deterministic", [](Rng& r, const Case&, Mutation& m) {
                 m.l.deterministic = false;
                 m.l.shards = r.in(1, 4);
                 m.names = {"ddp.shards"};
                 return true;
               }});
  v.push_back({"ddp.shards not dividing the micro-batch, or not the dp ranks", [](Rng& r, const Case&, Mutation& m) {
                 if (m.l.pp > 1 || m.l.cp > 1) return false;
                 m.l.deterministic = true;
                 m.l.zero = 0;
                 m.l.offload = "none";
                 std::vector<int> bad;
                 for (int s = 2; s <= 8; ++s)
                   if (m.l.dp > 1 ? s != m.l.dp : m.l.batch % s != 0) bad.push_back(s);
                 if (bad.empty()) return false;
                 m.l.shards = r.pick(bad);
                 m.names = {"ddp.shards"};
                 return true;
               }});
  v.push_back({"a value out of its range or choices", [](Rng& r, const Case&, Mutation& m) {
                 static const std::vector<std::pair<std::string, std::string>> bad = {
                     {"parallel.tp=0", "parallel.tp"},
                     {"parallel.pp=0", "parallel.pp"},
                     {"parallel.cp=-2", "parallel.cp"},
                     {"parallel.dp=-1", "parallel.dp"},
                     {"zero.stage=4", "zero.stage"},
                     {"parallel.pp_virtual=0", "parallel.pp_virtual"},
                     {"parallel.cp_kind=zigzag", "parallel.cp_kind"},
                     {"parallel.pp_schedule=2f2b", "parallel.pp_schedule"},
                     {"zero.offload=disk", "zero.offload"},
                     {"parallel.sequence_parallel=maybe", "parallel.sequence_parallel"},
                     {"ddp.bucket_mb=0", "ddp.bucket_mb"},
                     {"model.recompute=most", "model.recompute"}};
                 const auto& [kv, key] = r.pick(bad);
                 m.overrides = {kv};
                 m.names = {key};
                 return true;
               }});
}

// Every mutation, in a fixed order (a case's seed picks among them by index).
Mutators mutators() {
  Mutators v;
  add_degree_mutators(v);
  add_pipeline_mutators(v);
  add_option_mutators(v);
  return v;
}

// Replaces the entry of `kv`'s key in `keys`, or appends it.
void set_key(std::vector<std::string>& keys, const std::string& kv) {
  const std::string key = kv.substr(0, kv.find('=') + 1);
  for (std::string& k : keys)
    if (k.compare(0, key.size(), key) == 0) {
      k = kv;
      return;
    }
  keys.push_back(kv);
}

}  // namespace

Invalid draw_invalid(Rng& r, const Case& c) {
  const auto all = mutators();
  Invalid inv;
  inv.on_resume = r.chance(0.5);
  const Layout& base = inv.on_resume ? c.resumed : c.first;
  for (;;) {  // the value-range mutation always applies, so this ends
    const auto& [what, mutate] = all[static_cast<size_t>(r.below(static_cast<int>(all.size())))];
    Mutation m;
    m.l = base;
    if (!mutate(r, c, m)) continue;
    if (m.overrides.empty() && m.model_over.empty() && m.l.world == degrees(m.l) && valid(c.model, c.train, m.l))
      continue;  // broke nothing after all
    if (m.l.world == base.world && m.l.world != degrees(m.l) && m.overrides.empty())
      m.l.world = std::min(degrees(m.l), kMaxWorld);  // a degree changed: launch its ranks
    inv.what = what;
    inv.world = m.l.world;
    inv.keys = layout_keys(m.l);
    for (const std::string& kv : m.overrides) set_key(inv.keys, kv);
    inv.model_over = m.model_over;
    inv.names = m.names;
    return inv;
  }
}

std::vector<std::string> with_overrides(std::vector<std::string> keys, const std::vector<std::string>& over) {
  for (const std::string& kv : over) set_key(keys, kv);
  return keys;
}

}  // namespace layout_fuzz
