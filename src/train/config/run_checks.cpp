#include "train/config/run_checks.h"

#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "hf/hf_model.h"
#include "parallel/mesh.h"

namespace parallm::train {

namespace fs = std::filesystem;

data::Vocab dataset_vocabulary(RunConfig& cfg, const nlohmann::json* saved_config) {
  data::Vocab vocab = data::Vocab::load(cfg.data.dir);
  std::error_code ec;
  if (saved_config && fs::exists(fs::path(cfg.train.out_dir) / "meta.json", ec)) {
    const data::Vocab trained = data::Vocab::load(cfg.train.out_dir);
    const std::string saved_dir = saved_config->value("data.dir", std::string("?"));
    PARALLM_CHECK(vocab == trained, ConfigError, "config",
                  "data.dir={}: its vocabulary ({}) is not the one the run in {} was trained with ({}, in "
                  "{}/meta.json); resume on the run's dataset (data.dir={}), or start a new run in another "
                  "train.out_dir",
                  cfg.data.dir, vocab.describe(), cfg.train.out_dir, trained.describe(), cfg.train.out_dir, saved_dir);
  }
  if (!cfg.vocab_size_set) cfg.model.vocab_size = vocab.size();
  // Not set by the user: train.init_from=hf's config.json gave it (take_hf_model).
  PARALLM_CHECK(
      cfg.model.vocab_size >= vocab.size() || cfg.train.init_from != InitFrom::Hf || cfg.given("model.vocab_size"),
      ConfigError, "config",
      "train.init_from=hf:{}: its config.json's vocab_size ({}) is smaller than the dataset's vocabulary ({} "
      "in {}/meta.json): the model has no token rows for ids {} to {}; prepare the dataset with that "
      "model's tokenizer (parallm prepare gpt2 --vocab {} ...)",
      cfg.train.hf_dir, cfg.model.vocab_size, vocab.describe(), cfg.data.dir, cfg.model.vocab_size, vocab.size() - 1,
      cfg.train.hf_dir);
  PARALLM_CHECK(cfg.model.vocab_size >= vocab.size(), ConfigError, "config",
                "model.vocab_size={} is smaller than the dataset's vocabulary ({} in {}/meta.json): "
                "leave model.vocab_size unset (it then comes from the dataset) or set it to at least {}",
                cfg.model.vocab_size, vocab.describe(), cfg.data.dir, vocab.size());
  if (cfg.model.vocab_size > vocab.size())
    log::info("model.vocab_size={} pads the dataset's {}: ids {} to {} never occur in the data and are never sampled",
              cfg.model.vocab_size, vocab.describe(), vocab.size(), cfg.model.vocab_size - 1);
  return vocab;
}

namespace {
// A Llama-family directory's model: every architecture key the user gave
// must be the file's; the rest are taken from it (block_size may shrink, the
// vocabulary grow, as for GPT-2).
void take_hf_llama(RunConfig& cfg) {
  const std::string& dir = cfg.train.hf_dir;
  RunConfig file = cfg;
  file.model = hf::hf_llama_config(dir);
  file.model.dropout = cfg.model.dropout;
  file.model.recompute = cfg.model.recompute;
  const nlohmann::json mine = cfg.to_json(), theirs = file.to_json();
  // Every architecture key but the ones a directory's model may change (block_size, vocab_size) and GPT-2's gelu.
  for (const std::string& k : architecture_keys()) {
    if (k == "model.block_size" || k == "model.vocab_size" || k == "model.gelu") continue;
    PARALLM_CHECK(!cfg.given(k) || mine[k] == theirs[k], ConfigError, "config",
                  "{}={}, but train.init_from=hf:{} holds a model with {}={}: leave {} out", k, mine[k].dump(), dir, k,
                  theirs[k].dump(), k);
  }
  const int64_t block = cfg.given("model.block_size") ? cfg.model.block_size : file.model.block_size;
  PARALLM_CHECK(block <= file.model.block_size, ConfigError, "config",
                "model.block_size={} is longer than hf:{}'s {} positions (max_position_embeddings)", block, dir,
                file.model.block_size);
  const int64_t vocab = cfg.vocab_size_set ? cfg.model.vocab_size : file.model.vocab_size;
  PARALLM_CHECK(vocab >= file.model.vocab_size, ConfigError, "config",
                "model.vocab_size={} is smaller than hf:{}'s {} tokens", vocab, dir, file.model.vocab_size);
  cfg.model = file.model;
  cfg.model.block_size = block;
  cfg.model.vocab_size = vocab;
  cfg.vocab_size_set = true;
}
}  // namespace

void take_hf_model(RunConfig& cfg) {
  const std::string& dir = cfg.train.hf_dir;
  if (hf::is_llama_family(dir)) return take_hf_llama(cfg);
  const model::GPTConfig file = hf::hf_gpt2_config(dir);
  model::GPTConfig& m = cfg.model;
  auto same = [&](const char* key, int64_t& mine, int64_t theirs) {
    PARALLM_CHECK(!cfg.given(key) || mine == theirs, ConfigError, "config",
                  "{}={}, but train.init_from=hf:{} holds a model with {}: leave {} out", key, mine, dir, theirs, key);
    mine = theirs;
  };
  same("model.n_layer", m.n_layer, file.n_layer);
  same("model.n_head", m.n_head, file.n_head);
  same("model.n_embd", m.n_embd, file.n_embd);
  PARALLM_CHECK(!cfg.given("model.bias") || m.bias, ConfigError, "config",
                "model.bias=false, but train.init_from=hf:{} holds biases: leave model.bias out", dir);
  m.bias = true;
  PARALLM_CHECK(!cfg.given("model.gelu") || m.gelu == file.gelu, ConfigError, "config",
                "model.gelu differs from the activation_function of hf:{}: leave model.gelu out", dir);
  m.gelu = file.gelu;
  PARALLM_CHECK(!cfg.given("model.tie_embeddings") || m.tie_embeddings == file.tie_embeddings, ConfigError, "config",
                "model.tie_embeddings={}, but train.init_from=hf:{} has tie_word_embeddings {}: leave "
                "model.tie_embeddings out",
                m.tie_embeddings, dir, file.tie_embeddings);
  m.tie_embeddings = file.tie_embeddings;
  if (!cfg.given("model.block_size")) m.block_size = file.block_size;
  PARALLM_CHECK(m.block_size <= file.block_size, ConfigError, "config",
                "model.block_size={} is longer than hf:{}'s {} positions", m.block_size, dir, file.block_size);
  if (!cfg.vocab_size_set) m.vocab_size = file.vocab_size;
  cfg.vocab_size_set = true;
  PARALLM_CHECK(m.vocab_size >= file.vocab_size, ConfigError, "config",
                "model.vocab_size={} is smaller than hf:{}'s {} tokens", m.vocab_size, dir, file.vocab_size);
}

void check_hf_vocabulary(const RunConfig& cfg, const data::Vocab& vocab) {
  const std::string& dir = cfg.train.hf_dir;
  PARALLM_CHECK(vocab.is_bpe(), ConfigError, "config",
                "train.init_from=hf:{} is a BPE model, but data.dir={} holds {}: prepare the dataset with its "
                "tokenizer (parallm prepare gpt2 --vocab {} ...)",
                dir, cfg.data.dir, vocab.describe(), dir);
  const auto has = [&](const char* f) { return fs::exists(fs::path(dir) / f); };
  if (!has("tokenizer.json") && !has("vocab.json") && !has("encoder.json")) return;
  PARALLM_CHECK(data::Bpe::load_dir(dir) == *vocab.bpe(), ConfigError, "config",
                "data.dir={}: its tokenizer ({}) is not the one of train.init_from=hf:{}: prepare the dataset with "
                "it (parallm prepare gpt2 --vocab {} ...)",
                cfg.data.dir, vocab.describe(), dir, dir);
}

std::string nothing_left(const RunConfig& cfg, int64_t ckpt_iter) {
  // A checkpoint holds the state before iteration ckpt_iter; train.max_iters is the last one trained.
  if (cfg.train.eval_only || ckpt_iter <= cfg.train.max_iters) return "";
  return fmt::format(
      "nothing to do: the checkpoint in {} resumes at iteration {}, past the last one, train.max_iters={}; the run "
      "is left as it is (raise train.max_iters to train further)",
      cfg.train.out_dir, ckpt_iter, cfg.train.max_iters);
}

namespace {

// "dp 2 x tp 2 x pp 2 x cp 2 x ep 2", the axes above 1 after dp.
std::string dims_text(int64_t dp, int64_t tp, int64_t pp, int64_t cp, int64_t ep) {
  std::string t = fmt::format("dp {}", dp);
  for (const auto& [name, v] : {std::pair{"tp", tp}, std::pair{"pp", pp}, std::pair{"cp", cp}, std::pair{"ep", ep}})
    if (v > 1) t += fmt::format(" x {} {}", name, v);
  return t;
}

// A layout record's degrees and world: "dp 1 x tp 2 on 2 ranks".
std::string record_text(const nlohmann::json& r) {
  const int64_t n = r["world"].get<int64_t>();
  return fmt::format("{} on {} rank{}",
                     dims_text(r["dp"].get<int64_t>(), r["tp"].get<int64_t>(), r["pp"].get<int64_t>(),
                               r["cp"].get<int64_t>(), r.value("ep", int64_t{1})),
                     n, n == 1 ? "" : "s");
}

}  // namespace

nlohmann::json layout_record(const RunConfig& cfg, const parallel::MeshDims& d) {
  return {{"world", d.dp * d.tp * d.pp * d.cp},
          {"dp", d.dp},
          {"tp", d.tp},
          {"pp", d.pp},
          {"cp", d.cp},
          {"ep", d.ep},
          {"sequences", d.dp * cfg.train.batch_size * cfg.optimizer.gas}};
}

LayoutNote fit_resumed_layout(RunConfig& cfg, const RunConfig& asked, const nlohmann::json& saved, int world) {
  std::string given, inherited;  // the layout keys given; those the checkpoint set to other than their defaults
  const nlohmann::json mine = cfg.to_json(), defaults = RunConfig().to_json();
  for (const std::string& k : RunConfig::layout_keys()) {
    if (asked.gives(k))
      given += (given.empty() ? "" : ", ") + k;
    else if (mine[k] != defaults[k])
      inherited += fmt::format("{}{}={}", inherited.empty() ? "" : ", ", k, mine[k].dump());
  }
  const std::string was = saved.is_object() ? record_text(saved) : inherited;
  std::string note;
  parallel::MeshDims d = cfg.mesh_dims();
  const int64_t model = int64_t{d.tp} * d.pp * d.cp;
  // Expert parallelism needs dp x cp to divide by ep (the dp this job would derive). A degree out of range (0,
  // negative: a given key) is resolve_mesh_dims's ConfigError below, not a division here.
  const bool sane = model > 0 && d.ep > 0;
  const int64_t dp = d.dp > 0 ? d.dp : sane ? world / model : 0;
  const bool ep_fits = !sane || (world % model == 0 && (dp * d.cp) % d.ep == 0);
  if (given.empty() && sane && (world % model != 0 || (d.dp > 0 && d.dp * model != world) || !ep_fits)) {
    // None given, and the checkpoint's degrees do not fit this job: data parallel over every rank, said.
    note = fmt::format("the checkpoint's layout ({}) does not fit this job's {} rank{}", was, world,
                       world == 1 ? "" : "s");
    for (const std::string& k : RunConfig::layout_keys()) cfg.take_default(k);
    d = cfg.mesh_dims();
  }
  try {
    d = parallel::resolve_mesh_dims(d, world, 0, true);
  } catch (const ConfigError& e) {
    if (inherited.empty()) throw;
    throw ConfigError("config", fmt::format("{} ({} from the checkpoint: a resume keeps the layout keys it does not "
                                            "give; give them too to change them)",
                                            e.message(), inherited));
  }
  const nlohmann::json now = layout_record(cfg, d);
  if (!saved.is_object() && note.empty()) return {};
  const std::string now_text = dims_text(d.dp, d.tp, d.pp, d.cp, d.ep);
  bool warn = !note.empty();
  if (!note.empty())
    note += fmt::format("; resuming as {} (give the parallel.* keys to choose the layout)", now_text);
  else if (record_text(now) != was)
    note = fmt::format("layout {} (the checkpoint's: {})", now_text, was);
  const int64_t seqs = now["sequences"].get<int64_t>();
  if (saved.is_object() && seqs != saved["sequences"].get<int64_t>()) {
    warn = true;
    note += fmt::format(
        "{}the global batch changes from {} to {} sequences an iteration (parallel.dp {} x model.batch_size {} x "
        "optimizer.gas {}), so the run leaves the checkpoint's trajectory",
        note.empty() ? "" : "; ", saved["sequences"].get<int64_t>(), seqs, d.dp, cfg.train.batch_size,
        cfg.optimizer.gas);
  }
  if (note.empty()) return {};
  return {"resume: " + note, warn};
}

}  // namespace parallm::train
