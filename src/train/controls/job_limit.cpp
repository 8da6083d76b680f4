#include "train/controls/job_limit.h"

#include <array>
#include <cstdio>
#include <regex>

#include "core/error.h"
#include "core/stop_signal.h"
#include "core/text.h"

namespace parallm::train {

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "hh:mm:ss", "mm:ss" or "ss" (each part a whole number): seconds.
std::optional<double> clock_seconds(const std::string& text) {
  double total = 0;
  int parts = 0;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t colon = std::min(text.find(':', at), text.size());
    const auto v = to_int(std::string_view(text).substr(at, colon - at));
    if (!v || *v < 0 || ++parts > 3) return std::nullopt;
    total = total * 60 + static_cast<double>(*v);
    at = colon + 1;
  }
  return total;
}

// "name = value" lines of qstat -f: the value of `name`.
std::optional<std::string> qstat_field(const std::string& text, const std::string& name) {
  const std::regex re("^\\s*" + std::regex_replace(name, std::regex("\\."), "\\.") + "\\s*=\\s*(\\S+)\\s*$",
                      std::regex::multiline);
  std::smatch m;
  if (!std::regex_search(text, m, re)) return std::nullopt;
  return m[1].str();
}

}  // namespace

RunCommand run_command() {
  return [](const std::string& command) {
    std::string out;
    const stop_signal::Unblocked unblocked;  // the child starts with SIGTERM deliverable
    FILE* p = ::popen((command + " 2>/dev/null").c_str(), "r");
    if (!p) return out;
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    return ::pclose(p) == 0 ? out : std::string();
  };
}

std::optional<double> parse_slurm_time_left(const std::string& text) {
  const std::string t = trim(text);
  const size_t dash = t.find('-');
  if (dash == std::string::npos) return clock_seconds(t);
  const auto days = to_int(std::string_view(t).substr(0, dash));
  const auto rest = clock_seconds(t.substr(dash + 1));
  if (!days || *days < 0 || !rest) return std::nullopt;
  return static_cast<double>(*days) * 86400 + *rest;
}

std::optional<double> parse_pbs_time_left(const std::string& qstat_f) {
  const auto limit = qstat_field(qstat_f, "Resource_List.walltime");
  if (!limit) return std::nullopt;
  const auto total = clock_seconds(*limit);
  const auto used_text = qstat_field(qstat_f, "resources_used.walltime");
  const auto used = used_text ? clock_seconds(*used_text) : std::optional<double>(0);
  if (!total || !used) return std::nullopt;
  return std::max(0.0, *total - *used);
}

double job_time_left_s(const comm::EnvLookup& env, const RunCommand& run, double now) {
  const char* slurm = env("SLURM_JOB_ID");
  const char* pbs = env("PBS_JOBID");
  if (slurm && *slurm) {
    if (const char* end = env("SLURM_JOB_END_TIME"))
      if (const auto e = to_int(end)) return std::max(0.0, static_cast<double>(*e) - now);
    const std::string out = run(fmt::format("squeue -h -j {} -o %L", slurm));
    const auto left = parse_slurm_time_left(out);
    PARALLM_CHECK(left, ConfigError, "config",
                  "train.max_duration=auto: Slurm job {} has no time limit to read (`squeue -h -j {} -o %L` said "
                  "\"{}\"); give one (train.max_duration=5h50m) or submit with --time",
                  slurm, slurm, trim(out));
    return *left;
  }
  if (pbs && *pbs) {
    const std::string out = run(fmt::format("qstat -f {}", pbs));
    const auto left = parse_pbs_time_left(out);
    PARALLM_CHECK(left, ConfigError, "config",
                  "train.max_duration=auto: PBS job {} has no walltime to read (`qstat -f {}` gave no "
                  "Resource_List.walltime); give one (train.max_duration=5h50m) or submit with -l walltime=",
                  pbs, pbs);
    return *left;
  }
  throw ConfigError("config",
                    "train.max_duration=auto reads the job's end time from Slurm or PBS, but this process is in no "
                    "job (neither SLURM_JOB_ID nor PBS_JOBID is set); give a duration (train.max_duration=5h50m)");
}

}  // namespace parallm::train
