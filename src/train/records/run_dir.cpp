#include "train/records/run_dir.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/text.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/ckpt_dirs.h"

namespace parallm::train {

namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  write_file_atomic(p.string(), {{text.data(), text.size()}});
}

// metrics.jsonl without the records of steps >= `from` (a resumed run writes
// them again), nor any of `carried` (written again after it), nor a line a
// crash left half written.
void drop_metrics_from(const fs::path& p, int64_t from, const nlohmann::json& carried) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return;
  std::istringstream in(read_text_file(p.string(), "train"));  // a regular file, or an error naming it
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() >= from) continue;
    if (std::find(carried.begin(), carried.end(), j) != carried.end()) continue;
    kept += line + "\n";
  }
  write_text(p, kept);
}

// The highest n of the repro-<n>.json files in `dir` (0: none).
int last_attempt(const fs::path& dir) {
  int last = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("repro-", 0) != 0 || name.size() <= 11 || name.substr(name.size() - 5) != ".json") continue;
    if (const auto n = to_int(name.substr(6, name.size() - 11))) last = std::max(last, static_cast<int>(*n));
  }
  return last;
}

}  // namespace

std::string scratch_refusal(const RunConfig& cfg) {
  if (cfg.train.overwrite) return "";
  const std::vector<std::string> names = checkpoint_names(cfg.train.out_dir);
  if (names.empty()) return "";
  std::string held;
  for (const auto& name : names) {
    std::string at;
    try {
      at = fmt::format("iteration {}",
                       read_checkpoint_meta(CkptDir(cfg.train.out_dir, name)).value("iter", int64_t{-1}));
    } catch (const std::exception&) {
      at = "not readable";
    }
    held += fmt::format("{}{} ({})", held.empty() ? "" : ", ", name, at);
  }
  return fmt::format(
      "train.out_dir={} already holds {} {}; continue it with train.init_from=resume, start over with "
      "train.overwrite=true (which deletes {}), or choose another train.out_dir",
      cfg.train.out_dir, names.size() == 1 ? "a checkpoint" : "checkpoints", held, names.size() == 1 ? "it" : "them");
}

RunDir::LogAttach::LogAttach(const std::string& path, bool truncate) {
  log::add_file(path, truncate);
}

RunDir::LogAttach::~LogAttach() {
  log::remove_file();
}

namespace {
// `dir`, created if need be.
fs::path made(const std::string& dir) {
  make_directories(dir, "train", "train.out_dir");
  return dir;
}

// Removes what an interrupted save or write left in `dir` (the <name>.tmp of
// any checkpoint), saying what it was.
void remove_leftovers(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> partial;  // the <name>.tmp directories, collected before any goes
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) partial.push_back(name);
  }
  for (const auto& name : partial) {
    const std::string base = name.substr(0, name.size() - 4);
    if (base != "ckpt" && !step_of(base)) continue;
    fs::remove_all(dir / name, ec);
    PARALLM_CHECK(!ec, IoError, "train", "cannot delete {}, left by a checkpoint save that did not finish: {}",
                  (dir / name).string(), ec.message());
    // The slot's complete checkpoint: <base>/, or <base>.old/ after a crash between the two renames.
    const bool whole = fs::exists(dir / base / "state.json", ec), old = fs::exists(dir / (base + ".old"), ec);
    log::warn("removed {}: a checkpoint save that did not finish (a crash or a full disk) left it; {}",
              (dir / name).string(),
              whole ? fmt::format("the last complete checkpoint of that slot is the one in {}/", base)
              : old ? fmt::format("the last complete checkpoint of that slot is the one in {}.old/", base)
                    : fmt::format("there is no complete {}/ (that save never finished)", base));
  }
  for (const char* f : {"config.json.tmp", "meta.json.tmp", "memory.json.tmp", "metrics.jsonl.tmp", "repro.json.tmp"}) {
    if (!fs::exists(dir / f, ec)) continue;
    fs::remove(dir / f, ec);
    if (!ec) log::warn("removed {}: a write that did not finish left it", (dir / f).string());
  }
}

// What a scratch run deletes: every checkpoint (and its .old), the rolled-back ones, meta.json, memory.json,
// the repro records and the TensorBoard event files.
std::vector<std::string> earlier_run(const fs::path& dir) {
  std::vector<std::string> names = {"rolled_back", "meta.json", "memory.json", "repro.json"};
  for (int n = last_attempt(dir); n > 0; --n) names.push_back(fmt::format("repro-{}.json", n));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) names.push_back(e.path().filename());
  for (const auto& name : checkpoint_names(dir.string())) {
    names.push_back(name);
    names.push_back(name + ".old");
  }
  return names;
}
}  // namespace

RunDir::RunDir(const RunConfig& cfg, Mode mode, int64_t resume_iter, const nlohmann::json& carried)
    : dir_(cfg.train.out_dir), log_((made(dir_) / "train.log").string(), mode == Mode::Scratch) {
  const fs::path dir(dir_);
  std::error_code ec;
  const bool rewrites = mode == Mode::Scratch || mode == Mode::Resume;  // config.json and meta.json
  if (rewrites) remove_leftovers(dir);
  if (mode == Mode::Scratch)  // a fresh directory, or train.overwrite=true: nothing of an earlier run stays
    for (const std::string& old : earlier_run(dir)) {
      fs::remove_all(dir / old, ec);
      PARALLM_CHECK(!ec, IoError, "train", "cannot delete {}: {}", (dir / old).string(), ec.message());
    }
  if (rewrites) {
    write_text(dir / "config.json", cfg.to_json().dump(2) + "\n");
    const fs::path meta = fs::path(cfg.data.dir) / "meta.json";
    if (fs::exists(meta, ec)) write_text(dir / "meta.json", read_text_file(meta.string(), "train"));
  }
  // A second resume of the same checkpoint finds the carried records written
  // by the first: they are dropped and written again, so they stand once.
  const bool carries = mode == Mode::Resume || mode == Mode::Records;
  if (carries) drop_metrics_from(dir / "metrics.jsonl", mode == Mode::Resume ? resume_iter : INT64_MAX, carried);
  metrics_ = std::make_unique<MetricsWriter>((dir / "metrics.jsonl").string(), mode != Mode::Scratch);
  if (carries)
    for (const auto& r : carried) metrics_->write(r);
  if (cfg.train.tensorboard && mode != Mode::Records) tb_ = std::make_unique<TbWriter>(dir_);
}

void RunDir::write_repro(nlohmann::json record) {
  const fs::path dir(dir_);
  const int n = last_attempt(dir) + 1;
  record["attempt"] = n;
  const std::string text = record.dump(2) + "\n";
  write_text(dir / fmt::format("repro-{}.json", n), text);
  write_text(dir / "repro.json", text);
}

void RunDir::write_memory(const nlohmann::json& record) {
  if (tb_) {
    nlohmann::json r = record;
    r["kind"] = "memory";
    tb_->write_record(r);
  }
  try {
    write_text(fs::path(dir_) / "memory.json", record.dump(2) + "\n");
  } catch (const Error& e) {
    if (memory_error_.empty()) memory_error_ = e.message();
  }
}

std::string RunDir::write_error() const {
  if (!metrics_->error().empty()) return metrics_->error();
  if (const std::string e = log::file_error(); !e.empty()) return e;
  if (tb_ && !tb_->write_error().empty()) return tb_->write_error();
  return memory_error_;
}

void RunDir::log_error(const std::string& what) {
  log::error_to_file("error: " + what);
}

}  // namespace parallm::train
