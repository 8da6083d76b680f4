// The checkpoint reader (checkpoint.h): state.json and its checks, the
// files' checksums, and ranges of any part read from either format, whole or
// (read_checkpoint_part) as a tensor-parallel rank's part. The writer is
// checkpoint_write.cpp.
#include "train/checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/checksum.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/gpu.h"
#include "core/log.h"
#include "parallel/group_ops.h"
#include "train/checkpoint/checkpoint_format.h"

namespace parallm::train {

namespace fs = std::filesystem;
using ckpt::kFormat;

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
  PARALLM_CHECK(meta["params"] == ckpt::layout_json(layout) && meta["flat_size"] == layout.total(), IoError,
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
