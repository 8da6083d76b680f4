#include "train/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/fileio.h"
#include "core/gpu.h"

namespace parallm::train {

namespace fs = std::filesystem;

namespace {
constexpr int kFormat = 1;

nlohmann::json layout_json(const model::ParamLayout& l) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : l.slots()) a.push_back({{"name", s.name}, {"shape", s.shape}, {"offset", s.offset}});
  return a;
}
}  // namespace

void save_checkpoint(const std::string& out_dir, const model::GPT& m, const optim::AdamW& opt, const TrainState& st,
                     const nlohmann::json& config) {
  const fs::path final_dir = fs::path(out_dir) / "ckpt";
  const fs::path tmp_dir = fs::path(out_dir) / "ckpt.tmp";
  const fs::path old_dir = fs::path(out_dir) / "ckpt.old";
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);
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
  write_file((tmp_dir / "model.bin").string(), {{p, pbytes}});
  write_file((tmp_dir / "optim.bin").string(), {{om, pbytes}, {ov, pbytes}});  // m then v
  nlohmann::json s;
  s["format"] = kFormat;
  s["iter"] = st.iter;
  s["best_val_loss"] = st.best_val_loss;
  s["optimizer_steps"] = opt.steps_taken();
  s["config"] = config;
  s["params"] = layout_json(m.layout());
  s["flat_size"] = m.flat_size();
  s["files"] = {{"model.bin", pbytes}, {"optim.bin", 2 * pbytes}};
  const std::string js = s.dump(1);
  write_file((tmp_dir / "state.json").string(), {{js.data(), js.size()}});
  // Swap in: ckpt -> ckpt.old, ckpt.tmp -> ckpt, drop ckpt.old.
  fs::remove_all(old_dir);
  if (fs::exists(final_dir)) fs::rename(final_dir, old_dir);
  fs::rename(tmp_dir, final_dir);
  fs::remove_all(old_dir);
}

nlohmann::json read_checkpoint_meta(const std::string& out_dir) {
  fs::path dir = fs::path(out_dir) / "ckpt";
  // A crash between the two renames leaves only ckpt.old: it is complete.
  if (!fs::exists(dir / "state.json") && fs::exists(fs::path(out_dir) / "ckpt.old" / "state.json"))
    dir = fs::path(out_dir) / "ckpt.old";
  std::ifstream f(dir / "state.json");
  PARALLM_CHECK(f.good(), IoError, "checkpoint.load", "no checkpoint in {} (expected {}/state.json)", out_dir,
                dir.string());
  nlohmann::json s;
  try {
    s = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw IoError("checkpoint.load", fmt::format("{}/state.json is corrupt: {}", dir.string(), e.what()));
  }
  PARALLM_CHECK(s.value("format", 0) == kFormat, IoError, "checkpoint.load", "{}: unsupported checkpoint format {}",
                dir.string(), s.value("format", 0));
  s["_dir"] = dir.string();
  return s;
}

TrainState load_checkpoint(const std::string& out_dir, model::GPT& m, optim::AdamW* opt) {
  nlohmann::json s = read_checkpoint_meta(out_dir);
  const fs::path dir = s["_dir"].get<std::string>();
  PARALLM_CHECK(s["params"] == layout_json(m.layout()) && s["flat_size"] == m.flat_size(), IoError, "checkpoint.load",
                "{} holds a different model layout than the configured model", dir.string());
  const size_t pbytes = static_cast<size_t>(m.flat_size()) * sizeof(float);
  if (m.device().is_cpu()) {
    read_file((dir / "model.bin").string(), {{m.params(), pbytes}});
    if (opt) read_file((dir / "optim.bin").string(), {{opt->m(), pbytes}, {opt->v(), pbytes}});
  } else {
    std::vector<float> hp(m.flat_size()), hm(m.flat_size()), hv(m.flat_size());
    read_file((dir / "model.bin").string(), {{hp.data(), pbytes}});
    m.load_params(hp.data());
    if (opt) {
      read_file((dir / "optim.bin").string(), {{hm.data(), pbytes}, {hv.data(), pbytes}});
      gpu::memcpy_h2d(opt->m(), hm.data(), pbytes);
      gpu::memcpy_h2d(opt->v(), hv.data(), pbytes);
    }
  }
  if (opt) opt->set_steps_taken(s["optimizer_steps"].get<int64_t>());
  TrainState st;
  st.iter = s["iter"];
  st.best_val_loss = s["best_val_loss"];
  return st;
}

}  // namespace parallm::train
