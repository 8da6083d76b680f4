// The hang record (hang_record.h).
#include "comm/hang_record.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/fileio.h"
#include "core/text.h"

namespace parallm::comm {

namespace {
std::mutex g_mu;
std::string g_path;
bool g_written = false;

std::string op_text(OpKind kind, uint64_t seq) {
  return seq ? fmt::format("{} #{}", op_kind_name(kind), seq) : "none";
}
}  // namespace

void set_hang_record_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_path = path;
}

std::string hang_record_json(const HangRecord& r) {
  nlohmann::ordered_json j;
  j["time"] = utc_timestamp();
  j["group"] = r.group;
  j["rank"] = r.rank;
  j["size"] = r.size;
  j["operation"] = r.operation;
  j["waited_s"] = r.waited_s;
  j["timeout_s"] = r.timeout_s;
  auto& ranks = j["ranks"] = nlohmann::ordered_json::array();
  for (const PeerState& p : r.ranks) {
    nlohmann::ordered_json e;
    e["rank"] = p.rank;
    if (p.world_rank >= 0) e["world_rank"] = p.world_rank;
    if (!p.host.empty()) e["host"] = p.host;
    e["answered"] = p.answered;
    if (p.answered) {
      e["last_completed"] = op_text(p.done_kind, p.done);
      e["in_progress"] = p.seq ? fmt::format("{} ({} elements)", op_text(p.kind, p.seq), p.count) : "none";
    }
    ranks.push_back(std::move(e));
  }
  j["error"] = r.error;
  if (!r.stacks.empty()) j["stacks"] = r.stacks;
  return j.dump(2) + "\n";
}

std::string write_hang_record(const HangRecord& record) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_path.empty() || g_written) return g_written ? g_path : "";
  try {
    const std::string text = hang_record_json(record);
    const std::filesystem::path dir = std::filesystem::path(g_path).parent_path();
    if (!dir.empty())
      std::filesystem::create_directories(dir);  // a rank on a host where the run's directory is not yet
    write_file_atomic(g_path, {{text.data(), text.size()}});
  } catch (const std::exception&) {
    return "";  // the error itself still goes out; an unwritable record must not hide it
  }
  g_written = true;
  return g_path;
}

}  // namespace parallm::comm
