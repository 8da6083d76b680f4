#include "train/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "core/checksum.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/gpu.h"
#include "core/log.h"
#include "parallel/group_ops.h"
#include "parallel/tensor_parallel.h"
#include "parallel/whole_model.h"
#include "train/checkpoint_format.h"

namespace parallm::train {

namespace fs = std::filesystem;

namespace {
using ckpt::kFormat;
using ckpt::kFormatSharded;

nlohmann::json layout_json(const model::ParamLayout& l) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : l.slots()) a.push_back({{"name", s.name}, {"shape", s.shape}, {"offset", s.offset}});
  return a;
}

// state.json without the format's own file list.
nlohmann::json state_json(int format, const model::ParamLayout& layout, int64_t optimizer_steps, const TrainState& st,
                          const nlohmann::json& config) {
  nlohmann::json s;
  s["format"] = format;
  s["iter"] = st.iter;
  s["best_val_loss"] = st.best_val_loss;
  s["optimizer_steps"] = optimizer_steps;
  if (st.loss_scale)
    s["loss_scale"] = {{"scale", st.loss_scale->scale},
                       {"good_steps", st.loss_scale->good_steps},
                       {"skipped", st.loss_scale->skipped}};
  if (!st.unwritten_records.empty()) s["unwritten_records"] = st.unwritten_records;
  if (!st.spike_guard.is_null()) s["spike_guard"] = st.spike_guard;
  if (!st.layout.is_null()) s["layout"] = st.layout;
  s["config"] = config;
  s["params"] = layout_json(layout);
  s["flat_size"] = layout.total();
  return s;
}

// The message of a save that failed with `what`, once its partial <name>.tmp
// is removed (so a full disk is not kept full by it).
std::string failed_save(const CkptDir& dir, const std::string& what) {
  std::error_code removed, ec;
  fs::remove_all(dir.tmp(), removed);
  const bool have = fs::exists(fs::path(dir.path()) / "state.json", ec) || fs::exists(dir.old(), ec);
  const std::string tmp = dir.name + ".tmp";
  return fmt::format("saving the checkpoint {} failed: {}; {}; {}", dir.path(), what,
                     removed ? "the partial " + tmp + " could not be removed (" + removed.message() + "): delete it"
                             : "the partial " + tmp + " was removed",
                     have ? "the previous checkpoint is intact" : "no earlier checkpoint exists");
}

// What a failed step of a save says: a parallm error without its [where].
std::string reason(const std::exception& e) {
  const auto* pe = dynamic_cast<const Error*>(&e);
  return pe ? pe->message() : e.what();
}

// Whether every rank of `world` managed its part of a save (`mine`): if not,
// rank 0 removes the partial <name>.tmp and every rank throws.
void agree_saved(comm::Communicator& world, const CkptDir& dir, bool mine, const std::string& what) {
  Tensor ok = Tensor::empty({1}, DType::I32);
  ok.data<int32_t>()[0] = mine ? 1 : 0;
  world.all_reduce(ok, comm::ReduceOp::Min);
  if (ok.data<int32_t>()[0] == 1) return;
  if (world.rank() != 0) throw IoError("checkpoint.save", what + " failed on at least one rank (rank 0 reports it)");
  throw IoError("checkpoint.save", failed_save(dir, what + " failed on at least one rank"));
}

// A collective save's fresh <name>.tmp, made by rank 0.
void start_save(comm::Communicator& world, const CkptDir& dir) {
  const fs::path tmp_dir = dir.tmp();
  std::string err;
  if (world.rank() == 0) {
    try {
      fs::remove_all(tmp_dir);
      fs::create_directories(tmp_dir);
    } catch (const std::exception& e) {
      err = reason(e);
    }
  }
  agree_saved(world, dir, err.empty(), "creating " + tmp_dir.string() + (err.empty() ? "" : ": " + err));
}

std::string shard_file(int r, int n) {
  return fmt::format("shard-{:05d}-of-{:05d}.bin", r, n);
}

// Writes state.json into the finished tmp directory, then swaps it in:
// <name> -> <name>.old, <name>.tmp -> <name>, drop <name>.old.
void finish_and_swap(const CkptDir& dir, const nlohmann::json& state) {
  const fs::path final_dir = dir.path(), tmp_dir = dir.tmp(), old_dir = dir.old();
  nlohmann::json s = state;
  s["state_crc32"] = ckpt::state_crc(s);
  const std::string js = s.dump(1);
  write_file((tmp_dir / "state.json").string(), {{js.data(), js.size()}});
  fs::remove_all(old_dir);
  if (fs::exists(final_dir)) fs::rename(final_dir, old_dir);
  fs::rename(tmp_dir, final_dir);
  fs::remove_all(old_dir);
}
}  // namespace

void save_checkpoint_whole(comm::Communicator& group, const CkptDir& dir, const model::ParamLayout& layout,
                           const model::GPTConfig& cfg, const float* p, const float* om, const float* ov,
                           int64_t optimizer_steps, const TrainState& st, const nlohmann::json& config) {
  const model::ParamLayout whole(cfg);
  const bool root = group.rank() == 0;
  std::vector<float> wp(root ? whole.total() : 0), wm(wp.size()), wv(wp.size());
  parallel::gather_whole(group, layout, whole, p, wp.data());
  parallel::gather_whole(group, layout, whole, om, wm.data());
  parallel::gather_whole(group, layout, whole, ov, wv.data());
  // The group agrees on the save: a write error on rank 0 stops every rank
  // of the group (its peers would otherwise wait in the next collective).
  std::exception_ptr failed;
  if (root) try {
      save_checkpoint(dir, whole, wp.data(), wm.data(), wv.data(), optimizer_steps, st, config);
    } catch (...) {
      failed = std::current_exception();
    }
  const bool saved = parallel::GroupAll(group)(!failed);
  if (failed) std::rethrow_exception(failed);
  PARALLM_CHECK(saved, IoError, "checkpoint",
                "rank 0 of the model-parallel group could not save the checkpoint {} (its error says why)", dir.path());
}

void save_checkpoint(const CkptDir& dir, const model::GPT& m, const optim::AdamW& opt, const TrainState& st,
                     const nlohmann::json& config, comm::Communicator* tp) {
  const model::ParamLayout& layout = m.layout();
  const size_t pbytes = static_cast<size_t>(m.flat_size()) * sizeof(float);
  // GPU buffers are staged through host copies; CPU buffers are written in place.
  std::vector<float> hp, hm, hv;
  const float *p = m.params(), *om = opt.m(), *ov = opt.v();
  if (!m.device().is_cpu()) {
    hp.resize(m.flat_size());
    hm.resize(m.flat_size());
    hv.resize(m.flat_size());
    m.store_params(hp.data());
    gpu::memcpy_d2h(hm.data(), opt.m(), pbytes);
    gpu::memcpy_d2h(hv.data(), opt.v(), pbytes);
    p = hp.data();
    om = hm.data();
    ov = hv.data();
  }
  if (layout.whole()) {
    save_checkpoint(dir, layout, p, om, ov, opt.steps_taken(), st, config);
    return;
  }
  // Tensor or pipeline parallel: the whole model, gathered on the group's rank 0, which writes it.
  PARALLM_CHECK(tp, InternalError, "checkpoint", "a part of the model is saved with its group");
  save_checkpoint_whole(*tp, dir, layout, m.config(), p, om, ov, opt.steps_taken(), st, config);
}

void save_checkpoint(const CkptDir& dir, const model::ParamLayout& layout, const float* p, const float* om,
                     const float* ov, int64_t optimizer_steps, const TrainState& st, const nlohmann::json& config) {
  const fs::path tmp_dir = dir.tmp();
  try {
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
    const size_t pbytes = static_cast<size_t>(layout.total()) * sizeof(float);
    write_file((tmp_dir / "model.bin").string(), {{p, pbytes}});
    write_file((tmp_dir / "optim.bin").string(), {{om, pbytes}, {ov, pbytes}});  // m then v
    nlohmann::json s = state_json(kFormat, layout, optimizer_steps, st, config);
    s["files"] = {{"model.bin", pbytes}, {"optim.bin", 2 * pbytes}};
    s["checksums"] = {{"model.bin", crc32_hex(crc32_of({{p, pbytes}}))},
                      {"optim.bin", crc32_hex(crc32_of({{om, pbytes}, {ov, pbytes}}))}};
    finish_and_swap(dir, s);
  } catch (const std::exception& e) {
    throw IoError("checkpoint.save", failed_save(dir, reason(e)));
  }
}

nlohmann::json read_checkpoint_meta(const CkptDir& at) {
  fs::path dir = at.path();
  std::error_code ec;
  // A crash between the two renames leaves only <name>.old: it is complete.
  if (!fs::exists(dir / "state.json", ec) && fs::exists(fs::path(at.old()) / "state.json", ec)) dir = at.old();
  const fs::path path = dir / "state.json";
  PARALLM_CHECK(fs::exists(path, ec), IoError, "checkpoint.load",
                "no checkpoint in {} (expected {}): train a run there first, or name the run directory that holds one",
                at.out_dir, path.string());
  nlohmann::json s = nlohmann::json::parse(read_text_file(path.string(), "checkpoint.load"), nullptr, false);
  PARALLM_CHECK(!s.is_discarded(), IoError, "checkpoint.load",
                "{} is not valid JSON; the checkpoint is damaged: restore it from a copy, or start over with "
                "train.overwrite=true",
                path.string());
  ckpt::check_state(s, dir.string());
  const int format = s["format"].get<int>();
  if (format < kFormat)
    log::warn("checkpoint {} (format {}) was written before checkpoints had checksums: it is loaded unverified",
              dir.string(), format);
  s["_dir"] = dir.string();
  return s;
}

void verify_checkpoint(const nlohmann::json& meta, comm::Communicator* world, bool params_only) {
  if (meta["format"].get<int>() < kFormat) return;  // written before checksums
  const fs::path dir = meta["_dir"].get<std::string>();
  std::vector<std::pair<std::string, std::string>> files;  // name, crc
  if (ckpt::sharded(meta["format"].get<int>())) {
    for (const auto& sh : meta["shards"]) files.emplace_back(sh["file"], sh["crc32"]);
  } else {
    for (const char* f : {"model.bin", "optim.bin"})
      if (!params_only || std::string(f) == "model.bin") files.emplace_back(f, meta["checksums"][f]);
  }
  const int n = world ? world->size() : 1, me = world ? world->rank() : 0;
  // The first damaged file (by index) this rank found among its share; files.size() if none.
  auto bad = static_cast<int32_t>(files.size());
  std::string why;
  for (size_t i = static_cast<size_t>(me); i < files.size() && bad == static_cast<int32_t>(files.size());
       i += static_cast<size_t>(n)) {
    try {
      const std::string got = crc32_hex(file_crc32((dir / files[i].first).string(), "checkpoint.load"));
      if (got != files[i].second) {
        bad = static_cast<int32_t>(i);
        why = fmt::format("its CRC-32 is {}, state.json recorded {}", got, files[i].second);
      }
    } catch (const Error& e) {
      bad = static_cast<int32_t>(i);
      why = e.message();
    }
  }
  if (n > 1) {  // every rank names the first damaged file, the rank that read it, and that rank's reason
    Tensor t = Tensor::empty({1}, DType::I32);
    auto min_of = [&](int32_t v) {
      t.data<int32_t>()[0] = v;
      world->all_reduce(t, comm::ReduceOp::Min);
      return t.data<int32_t>()[0];
    };
    const int32_t first = min_of(bad);
    const int32_t finder = min_of(bad == first ? me : n);
    if (first != static_cast<int32_t>(files.size())) {
      parallel::broadcast_text(*world, why, finder);
      why = fmt::format("found by rank {}: {}", finder, why);
    }
    bad = first;
  }
  PARALLM_CHECK(bad == static_cast<int32_t>(files.size()), IoError, "checkpoint.load",
                "{} is damaged ({}): the checkpoint cannot be trusted; restore it from a copy, or start over with "
                "train.overwrite=true",
                (dir / files[static_cast<size_t>(bad)].first).string(), why);
}

void check_checkpoint_layout(const nlohmann::json& meta, const model::ParamLayout& layout) {
  PARALLM_CHECK(meta["params"] == layout_json(layout) && meta["flat_size"] == layout.total(), IoError,
                "checkpoint.load", "{} holds a different model layout than the configured model",
                meta["_dir"].get<std::string>());
}

TrainState checkpoint_state(const nlohmann::json& meta, int64_t* optimizer_steps) {
  if (optimizer_steps) *optimizer_steps = meta["optimizer_steps"].get<int64_t>();
  TrainState st;
  st.iter = meta["iter"].get<int64_t>();
  st.best_val_loss = meta["best_val_loss"].get<double>();
  if (meta.contains("loss_scale")) {
    try {
      const auto& ls = meta["loss_scale"];
      st.loss_scale = optim::LossScaleState{ls.at("scale").get<double>(), ls.at("good_steps").get<int64_t>(),
                                            ls.at("skipped").get<int64_t>()};
    } catch (const nlohmann::json::exception& e) {
      throw IoError("checkpoint.load", fmt::format("state.json's loss_scale entry is malformed: {}", e.what()));
    }
  }
  st.spike_guard = meta.value("spike_guard", nlohmann::json());
  st.layout = meta.value("layout", nlohmann::json());
  return st;
}

void read_checkpoint_range(const nlohmann::json& meta, CkptPart part, int64_t begin, int64_t count, float* out) {
  const fs::path dir = meta["_dir"].get<std::string>();
  const int64_t total = meta["flat_size"].get<int64_t>();
  PARALLM_CHECK(begin >= 0 && count >= 0 && begin + count <= total, InternalError, "checkpoint.load",
                "range [{}, {}) outside the {} elements", begin, begin + count, total);
  constexpr size_t f = sizeof(float);
  const auto k = static_cast<int64_t>(part);  // 0 params, 1 m, 2 v
  if (!ckpt::sharded(meta["format"].get<int>())) {
    const bool model = part == CkptPart::Params;
    const auto bytes = static_cast<size_t>(total) * f;
    read_file_range((dir / (model ? "model.bin" : "optim.bin")).string(), model ? bytes : 2 * bytes,
                    static_cast<size_t>((model ? 0 : (k - 1) * total) + begin) * f, out,
                    static_cast<size_t>(count) * f);
    return;
  }
  int64_t covered = 0;
  for (const auto& sh : meta["shards"]) {
    const int64_t S = sh["shard_size"];
    const std::string file = (dir / sh["file"].get<std::string>()).string();
    for (const auto& p : sh["pieces"]) {
      const int64_t flat = p[0], n = p[1], local = p[2];
      const int64_t a = std::max(begin, flat), b = std::min(begin + count, flat + n);
      if (a >= b) continue;
      read_file_range(file, static_cast<size_t>(3 * S) * f, static_cast<size_t>(k * S + local + (a - flat)) * f,
                      out + (a - begin), static_cast<size_t>(b - a) * f);
      covered += b - a;
    }
  }
  PARALLM_CHECK(covered == count, IoError, "checkpoint.load",
                "{}: the shards cover {} of the {} elements asked for (incomplete manifest)", dir.string(), covered,
                count);
}

TrainState load_checkpoint(const CkptDir& dir, const model::ParamLayout& layout, float* params, float* om, float* ov,
                           int64_t* optimizer_steps, bool verify) {
  nlohmann::json s = read_checkpoint_meta(dir);
  check_checkpoint_layout(s, layout);
  if (verify) verify_checkpoint(s, nullptr, !(om && ov));
  read_checkpoint_range(s, CkptPart::Params, 0, layout.total(), params);
  if (om && ov) {
    read_checkpoint_range(s, CkptPart::M, 0, layout.total(), om);
    read_checkpoint_range(s, CkptPart::V, 0, layout.total(), ov);
  }
  return checkpoint_state(s, optimizer_steps);
}

void save_checkpoint_sharded(comm::Communicator& world, const CkptDir& dir, const model::ParamLayout& layout,
                             const float* params, const float* om, const float* ov, int64_t optimizer_steps,
                             const TrainState& st, const nlohmann::json& config) {
  const fs::path tmp_dir = dir.tmp();
  const int n = world.size(), me = world.rank();
  auto shard_of_rank = [&](int r) {
    nlohmann::json pieces = nlohmann::json::array();
    int64_t size = 0;
    for (int g = 0; g < layout.num_groups(); ++g) {
      const auto p = comm::shard_of(layout.group(g).end - layout.group(g).begin, n, r);
      pieces.push_back({layout.group(g).begin + p.offset, p.count, size});
      size += p.count;
    }
    return std::pair{pieces, size};
  };
  start_save(world, dir);
  const auto bytes = static_cast<size_t>(shard_of_rank(me).second) * sizeof(float);
  // Every rank's shard checksum, for rank 0's manifest.
  Tensor mine = Tensor::empty({1}, DType::I32), crcs = Tensor::empty({n}, DType::I32);
  const uint32_t crc = crc32_of({{params, bytes}, {om, bytes}, {ov, bytes}});
  std::memcpy(mine.data<int32_t>(), &crc, sizeof(crc));
  std::string err;
  try {
    write_file((tmp_dir / shard_file(me, n)).string(), {{params, bytes}, {om, bytes}, {ov, bytes}});
  } catch (const Error& e) {
    err = reason(e);
  }
  agree_saved(world, dir, err.empty(), "writing the shard files" + (err.empty() ? "" : ": " + err));
  world.all_gather(mine, crcs);
  if (me == 0) {
    try {
      nlohmann::json s = state_json(kFormatSharded, layout, optimizer_steps, st, config);
      s["world"] = n;
      s["shards"] = nlohmann::json::array();
      for (int r = 0; r < n; ++r) {
        auto [pieces, size] = shard_of_rank(r);
        uint32_t c = 0;
        std::memcpy(&c, crcs.data<int32_t>() + r, sizeof(c));
        s["shards"].push_back(
            {{"file", shard_file(r, n)}, {"shard_size", size}, {"crc32", crc32_hex(c)}, {"pieces", pieces}});
      }
      finish_and_swap(dir, s);
    } catch (const std::exception& e) {
      err = reason(e);
    }
  }
  agree_saved(world, dir, err.empty(), "writing the manifest" + (err.empty() ? "" : ": " + err));
}

void save_checkpoint_groups(comm::Communicator& world, int writer, int writers, const CkptDir& dir,
                            const model::ParamLayout& whole, const AssembleGroup& assemble, int64_t optimizer_steps,
                            const TrainState& st, const nlohmann::json& config) {
  PARALLM_CHECK(writers >= 1 && writer >= -1 && writer < writers, InternalError, "checkpoint.save", "writer {} of {}",
                writer, writers);
  const fs::path tmp_dir = dir.tmp();
  const int G = whole.num_groups();
  auto group_len = [&](int g) { return whole.group(g).end - whole.group(g).begin; };
  start_save(world, dir);
  // A writer streams its groups into its file; a failure stops its writing,
  // not its part in the collectives, and is agreed on at the end.
  std::string err;
  std::unique_ptr<FileWriter> file;
  uint32_t crc = 0;
  std::vector<float> buf;
  if (writer >= 0) {
    buf.resize(static_cast<size_t>(whole.max_group_size()));
    try {
      file = std::make_unique<FileWriter>((tmp_dir / shard_file(writer, writers)).string());
    } catch (const Error& e) {
      err = reason(e);
    }
  }
  for (CkptPart part : {CkptPart::Params, CkptPart::M, CkptPart::V})
    for (int g = 0; g < G; ++g) {
      const bool mine = writer >= 0 && g % writers == writer;
      assemble(part, g, mine ? buf.data() : nullptr);
      if (!mine || !file) continue;
      const size_t bytes = static_cast<size_t>(group_len(g)) * sizeof(float);
      try {
        file->append(buf.data(), bytes);
        crc = crc32_update(crc, buf.data(), bytes);
      } catch (const Error& e) {
        err = reason(e);
        file.reset();
      }
    }
  if (file) {
    try {
      file->finish();
    } catch (const Error& e) {
      err = reason(e);
    }
  }
  agree_saved(world, dir, err.empty(), "writing the shard files" + (err.empty() ? "" : ": " + err));
  // Every writer's checksum, for rank 0's manifest.
  const int n = world.size();
  Tensor mine = Tensor::empty({2}, DType::I32), all = Tensor::empty({2 * n}, DType::I32);
  mine.data<int32_t>()[0] = writer;
  std::memcpy(mine.data<int32_t>() + 1, &crc, sizeof(crc));
  world.all_gather(mine, all);
  if (world.rank() == 0) {
    try {
      std::vector<uint32_t> crcs(static_cast<size_t>(writers));
      std::vector<bool> seen(static_cast<size_t>(writers), false);
      for (int r = 0; r < n; ++r) {
        const int w = all.data<int32_t>()[2 * r];
        if (w < 0) continue;
        PARALLM_CHECK(w < writers && !seen[static_cast<size_t>(w)], InternalError, "checkpoint.save",
                      "writer {} claimed twice", w);
        seen[static_cast<size_t>(w)] = true;
        std::memcpy(&crcs[static_cast<size_t>(w)], all.data<int32_t>() + 2 * r + 1, sizeof(uint32_t));
      }
      PARALLM_CHECK(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }), InternalError, "checkpoint.save",
                    "a shard file of {} has no writer", writers);
      nlohmann::json s = state_json(kFormatSharded, whole, optimizer_steps, st, config);
      s["world"] = writers;
      s["shards"] = nlohmann::json::array();
      for (int w = 0; w < writers; ++w) {
        nlohmann::json pieces = nlohmann::json::array();
        int64_t size = 0;
        for (int g = w; g < G; g += writers) {
          pieces.push_back({whole.group(g).begin, group_len(g), size});
          size += group_len(g);
        }
        s["shards"].push_back({{"file", shard_file(w, writers)},
                               {"shard_size", size},
                               {"crc32", crc32_hex(crcs[static_cast<size_t>(w)])},
                               {"pieces", pieces}});
      }
      finish_and_swap(dir, s);
    } catch (const std::exception& e) {
      err = reason(e);
    }
  }
  agree_saved(world, dir, err.empty(), "writing the manifest" + (err.empty() ? "" : ": " + err));
}

void read_checkpoint_part(const nlohmann::json& meta, CkptPart part, const model::ParamLayout& layout,
                          const model::ParamLayout& whole, int64_t begin, int64_t count, float* out) {
  if (layout.whole()) {
    read_checkpoint_range(meta, part, begin, count, out);
    return;
  }
  PARALLM_CHECK(layout.num_units() <= whole.num_units() && begin >= 0 && count >= 0 && begin + count <= layout.total(),
                InternalError, "checkpoint.load", "range [{}, {}) of a part of {} elements (or another model)", begin,
                begin + count, layout.total());
  constexpr int64_t kWindow = int64_t{1} << 20;  // floats
  std::fill(out, out + count, 0.0f);             // alignment and padding rows
  std::vector<float> window;
  const int64_t end = begin + count;
  for (int i = 0; i < layout.num_units(); ++i) {
    const model::ParamSlot& s = layout.slots()[i];
    const int64_t a = std::max(begin, s.offset), b = std::min(end, s.offset + s.numel);
    if (a >= b) continue;
    const int64_t base = whole.slots()[static_cast<size_t>(s.global_index)].offset;
    auto dst = [&](const model::ParamLayout::WholeRun& r) { return out + (s.offset + r.local - begin); };
    const auto runs = layout.whole_runs(i, a - s.offset, b - s.offset);
    for (size_t j = 0; j < runs.size();) {
      const auto& r = runs[j];
      if (r.whole < 0) {  // padding: zero
        ++j;
        continue;
      }
      if (r.count >= kWindow) {
        read_checkpoint_range(meta, part, base + r.whole, r.count, dst(r));
        ++j;
        continue;
      }
      // The runs that fit in one window of the whole tensor from here, read at once.
      const int64_t w0 = r.whole;
      int64_t w1 = w0;
      size_t k = j;
      for (; k < runs.size() && runs[k].whole >= w0 && runs[k].whole + runs[k].count - w0 <= kWindow; ++k)
        w1 = std::max(w1, runs[k].whole + runs[k].count);
      window.resize(static_cast<size_t>(w1 - w0));
      read_checkpoint_range(meta, part, base + w0, w1 - w0, window.data());
      for (; j < k; ++j) std::copy_n(window.data() + (runs[j].whole - w0), runs[j].count, dst(runs[j]));
    }
  }
}

TrainState load_checkpoint(const CkptDir& dir, model::GPT& m, optim::AdamW* opt, bool verify) {
  int64_t steps = 0;
  TrainState st;
  const model::ParamLayout& layout = m.layout();
  if (m.device().is_cpu() && layout.whole()) {
    st = load_checkpoint(dir, layout, m.params(), opt ? opt->m() : nullptr, opt ? opt->v() : nullptr, &steps, verify);
    m.params_changed();  // CPU bf16 products read a bf16 copy of the parameters
    if (opt) opt->set_steps_taken(steps);
    return st;
  }
  // Through host buffers: a GPU model's, and a tensor-parallel rank's part of the whole model the checkpoint holds.
  const size_t n = static_cast<size_t>(m.flat_size()), pbytes = n * sizeof(float);
  std::vector<float> hp(n), hm(opt ? n : 0), hv(opt ? n : 0);
  if (layout.whole()) {
    st = load_checkpoint(dir, layout, hp.data(), opt ? hm.data() : nullptr, opt ? hv.data() : nullptr, &steps, verify);
  } else {  // this rank's part of every range, read where it lies in the whole model
    const model::ParamLayout whole(m.config());
    const nlohmann::json meta = read_checkpoint_meta(dir);
    check_checkpoint_layout(meta, whole);
    if (verify) verify_checkpoint(meta, nullptr, !opt);
    read_checkpoint_part(meta, CkptPart::Params, layout, whole, 0, layout.total(), hp.data());
    if (opt) {
      read_checkpoint_part(meta, CkptPart::M, layout, whole, 0, layout.total(), hm.data());
      read_checkpoint_part(meta, CkptPart::V, layout, whole, 0, layout.total(), hv.data());
    }
    st = checkpoint_state(meta, &steps);
  }
  m.load_params(hp.data());
  if (opt) {
    if (m.device().is_cpu()) {
      std::copy(hm.begin(), hm.end(), opt->m());
      std::copy(hv.begin(), hv.end(), opt->v());
    } else {
      gpu::memcpy_h2d(opt->m(), hm.data(), pbytes);
      gpu::memcpy_h2d(opt->v(), hv.data(), pbytes);
    }
    opt->set_steps_taken(steps);
  }
  return st;
}

}  // namespace parallm::train
