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
  const size_t pbytes = static_cast<size_t>(m.flat_size()) * sizeof(float);
  // GPU buffers are staged through host copies; CPU buffers are written in place.
  if (m.device().is_cpu()) {
    save_checkpoint(out_dir, m.layout(), m.params(), opt.m(), opt.v(), opt.steps_taken(), st, config);
    return;
  }
  std::vector<float> hp(m.flat_size()), hm(m.flat_size()), hv(m.flat_size());
  m.store_params(hp.data());
  gpu::memcpy_d2h(hm.data(), opt.m(), pbytes);
  gpu::memcpy_d2h(hv.data(), opt.v(), pbytes);
  save_checkpoint(out_dir, m.layout(), hp.data(), hm.data(), hv.data(), opt.steps_taken(), st, config);
}

void save_checkpoint(const std::string& out_dir, const model::ParamLayout& layout, const float* p, const float* om,
                     const float* ov, int64_t optimizer_steps, const TrainState& st, const nlohmann::json& config) {
  const fs::path final_dir = fs::path(out_dir) / "ckpt";
  const fs::path tmp_dir = fs::path(out_dir) / "ckpt.tmp";
  const fs::path old_dir = fs::path(out_dir) / "ckpt.old";
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);
  const size_t pbytes = static_cast<size_t>(layout.total()) * sizeof(float);
  write_file((tmp_dir / "model.bin").string(), {{p, pbytes}});
  write_file((tmp_dir / "optim.bin").string(), {{om, pbytes}, {ov, pbytes}});  // m then v
  nlohmann::json s;
  s["format"] = kFormat;
  s["iter"] = st.iter;
  s["best_val_loss"] = st.best_val_loss;
  s["optimizer_steps"] = optimizer_steps;
  s["config"] = config;
  s["params"] = layout_json(layout);
  s["flat_size"] = layout.total();
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

TrainState load_checkpoint(const std::string& out_dir, const model::ParamLayout& layout, float* params, float* om,
                           float* ov, int64_t* optimizer_steps) {
  nlohmann::json s = read_checkpoint_meta(out_dir);
  const fs::path dir = s["_dir"].get<std::string>();
  PARALLM_CHECK(s["params"] == layout_json(layout) && s["flat_size"] == layout.total(), IoError, "checkpoint.load",
                "{} holds a different model layout than the configured model", dir.string());
  const size_t pbytes = static_cast<size_t>(layout.total()) * sizeof(float);
  read_file((dir / "model.bin").string(), {{params, pbytes}});
  if (om && ov) read_file((dir / "optim.bin").string(), {{om, pbytes}, {ov, pbytes}});
  if (optimizer_steps) *optimizer_steps = s["optimizer_steps"].get<int64_t>();
  TrainState st;
  st.iter = s["iter"];
  st.best_val_loss = s["best_val_loss"];
  return st;
}

TrainState load_checkpoint(const std::string& out_dir, model::GPT& m, optim::AdamW* opt) {
  int64_t steps = 0;
  TrainState st;
  if (m.device().is_cpu()) {
    st = load_checkpoint(out_dir, m.layout(), m.params(), opt ? opt->m() : nullptr, opt ? opt->v() : nullptr, &steps);
  } else {
    const size_t pbytes = static_cast<size_t>(m.flat_size()) * sizeof(float);
    std::vector<float> hp(m.flat_size()), hm(opt ? m.flat_size() : 0), hv(opt ? m.flat_size() : 0);
    st = load_checkpoint(out_dir, m.layout(), hp.data(), opt ? hm.data() : nullptr, opt ? hv.data() : nullptr, &steps);
    m.load_params(hp.data());
    if (opt) {
      gpu::memcpy_h2d(opt->m(), hm.data(), pbytes);
      gpu::memcpy_h2d(opt->v(), hv.data(), pbytes);
    }
  }
  if (opt) opt->set_steps_taken(steps);
  return st;
}

}  // namespace parallm::train
