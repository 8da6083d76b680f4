#include "train/checkpoint/ckpt_dirs.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "core/text.h"
#include "parallel/group_ops.h"

namespace parallm::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kBest = "ckpt";
constexpr const char* kStepPrefix = "ckpt-";
constexpr const char* kRolledBack = "rolled_back";

// A candidate of rank 0's list: its name, its iteration (-1 when state.json
// does not read), and why rank 0 could not read it.
struct Candidate {
  std::string name, unreadable;
  int64_t iter = -1;
};

// Rank 0's candidates in the order they are tried (see ckpt_dirs.h). One
// whose state.json does not read (missing, truncated, altered) is tried where
// its name puts it, a step-numbered one at its name's iteration, the best one
// first (it may be the newest), so a resume that passes over it names it.
std::vector<Candidate> list_candidates(const std::string& out_dir, const ChooseOptions& o) {
  std::vector<Candidate> c;
  for (const auto& name : checkpoint_names(out_dir)) {
    Candidate k{name, "", -1};
    std::error_code ec;
    const fs::path state = fs::path(CkptDir(out_dir, name).path()) / "state.json";
    if (!fs::exists(state, ec) && !fs::exists(fs::path(CkptDir(out_dir, name).old()) / "state.json", ec)) {
      k.unreadable = fmt::format("{} is missing (a save that never finished, or a damaged checkpoint)", state.string());
      c.push_back(k);
      continue;
    }
    try {
      k.iter = read_checkpoint_meta(CkptDir(out_dir, name))["iter"].get<int64_t>();
    } catch (const Error& e) {
      k.unreadable = e.message();
    }
    c.push_back(k);
  }
  auto rank = [&](const Candidate& k) {  // smaller first
    const bool best = k.name == kBest;
    const int64_t at = k.unreadable.empty() ? k.iter
                       : best               ? std::numeric_limits<int64_t>::max()
                                            : step_of(k.name).value_or(-1);
    return std::tuple(o.best_first && best ? 0 : 1, -at, best ? 0 : 1, k.name);
  };
  std::stable_sort(c.begin(), c.end(), [&](const Candidate& a, const Candidate& b) { return rank(a) < rank(b); });
  return c;
}

nlohmann::json candidates_json(const std::vector<Candidate>& c) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& k : c) a.push_back({k.name, k.iter, k.unreadable});
  return a;
}

std::vector<Candidate> candidates_of(const nlohmann::json& a) {
  std::vector<Candidate> c;
  for (const auto& k : a) c.push_back({k[0].get<std::string>(), k[2].get<std::string>(), k[1].get<int64_t>()});
  return c;
}

// Why checkpoint `name` is not usable ("" when it is, with its state.json in
// *meta): rank 0's reason if it found one, else this rank's; agreed by all.
std::string check_candidate(const std::string& out_dir, const Candidate& k, comm::Communicator* world,
                            const ChooseOptions& o, nlohmann::json* meta) {
  if (!k.unreadable.empty()) return k.unreadable;
  std::string why;
  try {
    *meta = read_checkpoint_meta(CkptDir(out_dir, k.name));
  } catch (const Error& e) {
    why = e.message();
  }
  const bool read_everywhere = world ? parallel::GroupAll(*world)(why.empty()) : why.empty();
  if (!read_everywhere) return why.empty() ? "its state.json does not read on another rank (its error says why)" : why;
  try {
    verify_checkpoint(*meta, world, o.params_only);  // every rank throws alike
  } catch (const IoError& e) {
    return e.message();
  }
  return "";
}

std::string iterations_text(const std::vector<Candidate>& c) {
  std::vector<int64_t> its;
  for (const auto& k : c)
    if (k.iter >= 0) its.push_back(k.iter);
  std::sort(its.begin(), its.end());
  its.erase(std::unique(its.begin(), its.end()), its.end());
  std::string s;
  for (int64_t i : its) s += (s.empty() ? "" : ", ") + std::to_string(i);
  return s.empty() ? "none readable" : s;
}

}  // namespace

CkptDir step_checkpoint(const std::string& out_dir, int64_t next) {
  return CkptDir(out_dir, fmt::format("{}{:08d}", kStepPrefix, next));
}

CkptDir checkpoint_of(const nlohmann::json& meta) {
  const fs::path dir = meta["_dir"].get<std::string>();
  return CkptDir(dir.parent_path().string(), dir.filename().string());
}

std::optional<int64_t> step_of(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.size() < prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](unsigned char ch) { return std::isdigit(ch); }))
    return std::nullopt;
  return to_int(digits);
}

std::vector<std::string> checkpoint_names(const std::string& out_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    if (!e.is_directory(ec)) continue;
    std::string name = e.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".old") == 0) name.resize(name.size() - 4);
    if (name == kBest || step_of(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

void prune_step_checkpoints(const std::string& out_dir, int64_t keep) {
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const auto& name : checkpoint_names(out_dir))
    if (const auto it = step_of(name)) steps.emplace_back(*it, name);
  std::sort(steps.rbegin(), steps.rend());
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 0)); i < steps.size(); ++i) {
    const CkptDir dir(out_dir, steps[i].second);
    std::error_code ec;
    fs::remove_all(dir.path(), ec);
    if (!ec) fs::remove_all(dir.old(), ec);
    // A directory that will not go is only disk space: the run goes on, and says so.
    if (ec) log::warn("could not delete {} (train.keep_checkpoints={}): {}", dir.path(), keep, ec.message());
  }
}

nlohmann::json choose_checkpoint(const std::string& out_dir, comm::Communicator* world, const ChooseOptions& o) {
  const bool lead = !world || world->rank() == 0;
  std::string list;
  if (lead) list = candidates_json(list_candidates(out_dir, o)).dump();
  if (world) parallel::broadcast_text(*world, list, 0);
  const std::vector<Candidate> all = candidates_of(nlohmann::json::parse(list));
  if (all.empty()) return read_checkpoint_meta(CkptDir(out_dir));  // its IoError says there is none
  std::vector<Candidate> c;
  for (const auto& k : all)
    if (!o.at_iter || k.iter == *o.at_iter || (!k.unreadable.empty() && step_of(k.name) == o.at_iter)) c.push_back(k);
  PARALLM_CHECK(!c.empty(), ConfigError, "config",
                "train.resume_step={}: {} holds no checkpoint of iteration {} (its checkpoints' iterations: {})",
                *o.at_iter, out_dir, *o.at_iter, iterations_text(all));
  std::string skipped;
  for (const auto& k : c) {
    nlohmann::json meta;
    const std::string why = check_candidate(out_dir, k, world, o, &meta);
    const std::string path = CkptDir(out_dir, k.name).path();
    if (why.empty()) return meta;
    if (lead) log::warn("skipping {}: {}", path, why);
    skipped += fmt::format("\n  {}: {}", path, why);
  }
  throw IoError("checkpoint.load",
                fmt::format("no intact checkpoint in {}{}; each was skipped:{}", out_dir,
                            o.at_iter ? fmt::format(" of iteration {} (train.resume_step)", *o.at_iter) : "", skipped));
}

void set_aside_newer(const std::string& out_dir, int64_t iter) {
  const fs::path aside = fs::path(out_dir) / kRolledBack;
  for (const auto& name : checkpoint_names(out_dir)) {
    int64_t at = -1;
    try {
      at = read_checkpoint_meta(CkptDir(out_dir, name))["iter"].get<int64_t>();
    } catch (const Error&) {
      at = step_of(name).value_or(-1);  // a damaged best one stays where it is
    }
    if (at <= iter) continue;
    const CkptDir dir(out_dir, name);
    fs::create_directories(aside);
    for (const std::string& from : {dir.path(), dir.old()}) {
      std::error_code ec;
      if (!fs::exists(from, ec)) continue;
      const fs::path to = aside / fs::path(from).filename();
      fs::remove_all(to);
      fs::rename(from, to);
    }
    log::info("rollback to iteration {}: moved {} (iteration {}) to {}/", iter, dir.path(), at, aside.string());
  }
}

}  // namespace parallm::train
