#include "train/config/agree.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace parallm::train {

namespace {

// "rank 1", "ranks 0, 2", "ranks 0-3, 7": sorted ranks, runs collapsed.
std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + (j > i + 1 ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]));
    if (j == i + 1) s += fmt::format(", {}", ranks[j]);
    i = j + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

// "0.001 on ranks 0, 2; 0.002 on rank 1", values in order of their first rank.
std::string values_text(const std::vector<nlohmann::json>& per_rank, const std::string& key) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(per_rank.size()); ++r) {
    const std::string v = per_rank[r].contains(key) ? per_rank[r][key].dump() : "(unset)";
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) it = groups.insert(groups.end(), {v, {}});
    it->second.push_back(r);
  }
  if (groups.size() < 2) return "";
  std::string s;
  for (const auto& [v, ranks] : groups) s += (s.empty() ? "" : "; ") + v + " on " + ranks_text(ranks);
  return s;
}

}  // namespace

const std::set<std::string>& per_rank_keys() {
  static const std::set<std::string> keys = {"train.threads",    "train.progress", "train.device",
                                             "train.peak_flops", "comm.backend",   "comm.timeout_s"};
  return keys;
}

std::string describe_disagreement(const std::vector<nlohmann::json>& per_rank) {
  std::set<std::string> keys;  // sorted: every rank lists them in the same order
  for (const auto& j : per_rank)
    for (const auto& [k, v] : j.items()) keys.insert(k);
  std::vector<std::string> diffs;
  for (const auto& k : keys) {
    if (per_rank_keys().count(k)) continue;
    const std::string v = values_text(per_rank, k);
    if (!v.empty()) diffs.push_back(k + ": " + v);
  }
  if (diffs.empty()) return "";
  constexpr size_t kShown = 4;  // a launch with everything wrong still gets a readable message
  std::string s = "ranks disagree on " + diffs[0];
  for (size_t i = 1; i < std::min(diffs.size(), kShown); ++i) s += ", and on " + diffs[i];
  if (diffs.size() > kShown) s += fmt::format(", and on {} more keys", diffs.size() - kShown);
  return s + " (every rank must be launched with the same settings)";
}

void check_ranks_agree(const RunConfig& cfg, comm::Communicator& world) {
  const int n = world.size();
  if (n == 1) return;
  nlohmann::json mine = cfg.to_json();
  for (const auto& k : per_rank_keys()) mine.erase(k);
  const std::string text = mine.dump();  // ASCII-escaped control characters: no NUL inside
  Tensor len = Tensor::empty({1}, DType::I32);
  len.data<int32_t>()[0] = static_cast<int32_t>(text.size());
  world.all_reduce(len, comm::ReduceOp::Max);
  const int64_t words = (len.data<int32_t>()[0] + 3) / 4;  // 4 bytes per int32, zero padded
  Tensor in = Tensor::empty({words}, DType::I32), all = Tensor::empty({words * n}, DType::I32);
  std::memcpy(in.raw(), text.data(), text.size());
  world.all_gather(in, all);
  std::vector<nlohmann::json> per_rank;
  for (int r = 0; r < n; ++r) {
    const char* p = static_cast<const char*>(all.raw()) + r * words * 4;
    per_rank.push_back(nlohmann::json::parse(std::string(p, strnlen(p, static_cast<size_t>(words) * 4))));
  }
  const std::string msg = describe_disagreement(per_rank);
  PARALLM_CHECK(msg.empty(), ConfigError, "config", "{}", msg);
}

}  // namespace parallm::train
