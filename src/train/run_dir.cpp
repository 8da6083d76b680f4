#include "train/run_dir.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fileio.h"
#include "core/log.h"
#include "train/checkpoint.h"

namespace parallm::train {

namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  write_file_atomic(p.string(), {{text.data(), text.size()}});
}

// metrics.jsonl without the records of steps >= `from` (a resumed run writes them again).
void drop_metrics_from(const fs::path& p, int64_t from) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return;
  std::ifstream in(p);
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() >= from)
      continue;
    kept += line + "\n";
  }
  write_text(p, kept);
}

}  // namespace

void check_scratch_run_dir(const RunConfig& cfg) {
  if (cfg.overwrite || cfg.eval_only) return;
  nlohmann::json meta;
  try {
    meta = read_checkpoint_meta(cfg.out_dir);
  } catch (const IoError&) {
    return;  // no checkpoint there (or none that could be resumed): nothing to lose
  }
  throw ConfigError("config",
                    fmt::format("train.out_dir={} already holds a checkpoint (iteration {}); continue it with "
                                "train.init_from=resume, start over with train.overwrite=true (the checkpoint is "
                                "replaced at the first evaluation), or choose another train.out_dir",
                                cfg.out_dir, meta.value("iter", int64_t{-1})));
}

RunDir::RunDir(const RunConfig& cfg, int64_t resume_iter, bool keep_all_metrics) : dir_(cfg.out_dir) {
  const fs::path dir(dir_);
  std::error_code ec;
  fs::create_directories(dir, ec);
  PARALLM_CHECK(!ec && fs::is_directory(dir), IoError, "train", "cannot create train.out_dir={}: {}", dir_,
                ec ? ec.message() : std::string("a file of that name exists"));
  const bool resume = resume_iter >= 0;
  log::add_file((dir / "train.log").string(), /*truncate=*/!resume);
  write_text(dir / "config.json", cfg.to_json().dump(2) + "\n");
  const fs::path meta = fs::path(cfg.data_dir) / "meta.json";
  if (fs::exists(meta, ec)) write_text(dir / "meta.json", read_text_file(meta.string(), "train"));
  if (resume && !keep_all_metrics) drop_metrics_from(dir / "metrics.jsonl", resume_iter);
  metrics_ = std::make_unique<MetricsWriter>((dir / "metrics.jsonl").string(), resume);
}

RunDir::~RunDir() {
  log::remove_file();
}

void RunDir::write_memory(const nlohmann::json& record) const {
  write_text(fs::path(dir_) / "memory.json", record.dump(2) + "\n");
}

void RunDir::log_error(const std::string& what) {
  log::error_to_file("error: " + what);
}

}  // namespace parallm::train
