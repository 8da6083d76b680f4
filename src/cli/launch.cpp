// The launch planner (design: cli/launch.h). plan_launch() checks the
// request, picks how the ranks start (already inside a job, direct, Slurm,
// PBS, a hostfile or this host), sizes the job (nodes, ranks per node,
// threads per rank) and writes the launcher's command line; also the parsers
// of hostfiles and of `srun --mpi=list`.
#include "cli/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace parallm::cli {

const char* flavor_name(MpiFlavor f) {
  switch (f) {
    case MpiFlavor::OpenMpi:
      return "Open MPI";
    case MpiFlavor::Mpich:
      return "MPICH";
    case MpiFlavor::Pals:
      return "PALS";
    case MpiFlavor::None:
      return "none";
  }
  return "?";
}

MpiFlavor flavor_from_library(const std::string& v, bool in_pbs) {
  if (v.find("Open MPI") != std::string::npos) return MpiFlavor::OpenMpi;
  if (v.find("CRAY MPICH") != std::string::npos && in_pbs) return MpiFlavor::Pals;
  if (v.find("MPICH") != std::string::npos || v.find("Intel") != std::string::npos) return MpiFlavor::Mpich;
  return MpiFlavor::None;
}

namespace {

int to_count(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const long x = std::strtol(s.c_str(), &end, 10);
  PARALLM_CHECK(!s.empty() && *end == '\0' && x > 0 && x < (1L << 24), ConfigError, "launch",
                "{}: \"{}\" is not a count", what, s);
  return static_cast<int>(x);
}

int env_count(const comm::EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (!v || !*v) return -1;
  // SLURM_NTASKS_PER_NODE may read "2(x3)": the first number is the one that applies to this node.
  std::string s(v);
  s = s.substr(0, s.find('('));
  return to_count(s, name);
}

std::string first_on_path(const Machine& m, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (m.on_path(n)) return n;
  return "";
}

// The srun options: the job's shape and the PMI plugin this MPI needs,
// unless the user named one (--mpi-arg --mpi=..., or SLURM_MPI_TYPE).
std::vector<std::string> srun_argv(const LaunchRequest& req, const comm::EnvLookup& env, const Machine& m,
                                   MpiFlavor flavor, LaunchPlan& p) {
  PARALLM_CHECK(m.on_path("srun"), ConfigError, "launch", "a Slurm job, but no srun on PATH");
  const std::string n = std::to_string(p.ranks), ppn = std::to_string(p.ppn), t = std::to_string(p.threads);
  std::vector<std::string> a = {"srun", "-n", n, "--ntasks-per-node", ppn, "--cpus-per-task", t};
  // As many of the job's nodes as the ranks fill (a job that keeps spare nodes for restarts uses fewer); a restart
  // leaves out the failed nodes.
  const int used = std::min(p.nodes, (p.ranks + p.ppn - 1) / p.ppn);
  if (used < p.nodes || !req.exclude.empty()) a.insert(a.end(), {"-N", std::to_string(used)});
  if (req.restart) a.push_back("--overlap");
  if (!req.exclude.empty()) {
    std::string hosts;
    for (const auto& h : req.exclude) hosts += (hosts.empty() ? "" : ",") + h;
    a.push_back("--exclude=" + hosts);
    p.why += fmt::format("; without {}", hosts);
  }
  const bool named =
      std::any_of(req.extra.begin(), req.extra.end(), [](const std::string& x) { return x.rfind("--mpi", 0) == 0; });
  const char* type = env("SLURM_MPI_TYPE");
  // SLURM_MPI_TYPE=none (Slurm's default) names no PMI: tasks could not join; pick one as if unset.
  if (named || (type && *type && std::string(type) != "none")) {
    p.why += named ? "; PMI as given by --mpi-arg" : fmt::format("; PMI from SLURM_MPI_TYPE={}", type);
    return a;
  }
  const std::vector<std::string> offered = parse_srun_mpi_list(m.srun_mpi_list ? m.srun_mpi_list() : "");
  std::string list;
  for (const auto& o : offered) list += (list.empty() ? "" : ", ") + o;
  const std::string pick = pick_srun_mpi(flavor, offered);
  if (!pick.empty()) {
    a.push_back("--mpi=" + pick);
    p.why += fmt::format("; PMI {} for {} (srun offers {})", pick, flavor_name(flavor), list);
  } else {
    p.why += offered.empty() ? "; srun --mpi=list named no plugin: srun's MpiDefault applies"
                             : fmt::format("; srun offers no PMI {} uses ({}): srun's MpiDefault applies",
                                           flavor_name(flavor), list);
  }
  return a;
}

}  // namespace

std::vector<std::string> parse_srun_mpi_list(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("srun:", 0) == 0) line = line.substr(5);
    const auto colon = line.find("available:");
    if (colon != std::string::npos)
      line = line.substr(colon + 10);  // "specific pmix plugin versions available: pmix_v4"
    else if (line.find("...") != std::string::npos)
      continue;  // "MPI plugin types are..."
    for (char& c : line)
      if (c == ',') c = ' ';
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (w.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos &&
          std::find(names.begin(), names.end(), w) == names.end())
        names.push_back(w);
  }
  return names;
}

std::string pick_srun_mpi(MpiFlavor flavor, const std::vector<std::string>& offered) {
  auto has = [&](const std::string& x) { return std::find(offered.begin(), offered.end(), x) != offered.end(); };
  auto any_pmix = [&]() -> std::string {
    if (has("pmix")) return "pmix";
    for (const auto& o : offered)
      if (o.rfind("pmix_v", 0) == 0) return o;
    return "";
  };
  std::vector<std::string> order;
  switch (flavor) {
    case MpiFlavor::OpenMpi:
      order = {any_pmix(), "pmi2"};
      break;
    case MpiFlavor::Mpich:
      order = {"pmi2", any_pmix()};
      break;
    case MpiFlavor::Pals:
      order = {"cray_shasta", "pmi2"};
      break;
    case MpiFlavor::None:
      break;
  }
  for (const auto& o : order)
    if (!o.empty() && has(o)) return o;
  return "";
}

std::string hostfile_without(const std::string& text, const std::vector<std::string>& hosts) {
  std::string out, line;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    line = text.substr(at, end - at);
    at = end + 1;
    const size_t b = line.find_first_not_of(" \t");
    const size_t e = b == std::string::npos ? b : line.find_first_of(" \t:#", b);
    const std::string host = b == std::string::npos ? "" : line.substr(b, e == std::string::npos ? e : e - b);
    if (!host.empty() && host[0] != '#' && std::find(hosts.begin(), hosts.end(), host) != hosts.end()) continue;
    out += line + "\n";
  }
  return out;
}

Hostfile parse_hostfile(const std::string& text, const std::string& path) {
  Hostfile h;
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    int slots = 1;
    if (const auto colon = host.find(':'); colon != std::string::npos) {
      slots = to_count(host.substr(colon + 1), fmt::format("{}:{}: slots of {}", path, no, host));
      host = host.substr(0, colon);
    }
    while (words >> word) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      PARALLM_CHECK(eq != std::string::npos, ConfigError, "launch",
                    "{}:{}: \"{}\" after the host name is not key=value (expected slots=N)", path, no, word);
      if (key == "slots") slots = to_count(word.substr(eq + 1), fmt::format("{}:{}: slots", path, no));
      // max_slots and other Open MPI keys are left to mpirun.
    }
    PARALLM_CHECK(!host.empty(), ConfigError, "launch", "{}:{}: no host name", path, no);
    auto it = std::find(h.hosts.begin(), h.hosts.end(), host);
    if (it == h.hosts.end()) {
      h.hosts.push_back(host);
      h.slots.push_back(slots);
    } else {
      h.slots[it - h.hosts.begin()] += slots;
    }
  }
  PARALLM_CHECK(!h.hosts.empty(), ConfigError, "launch", "hostfile {} names no hosts", path);
  return h;
}

namespace {

// The request's own checks, before anything is detected.
void check_launch_request(const LaunchRequest& req) {
  static const char* kLaunchers[] = {"auto", "openmpi", "mpich", "pals", "srun", "direct"};
  PARALLM_CHECK(std::find(std::begin(kLaunchers), std::end(kLaunchers), req.launcher) != std::end(kLaunchers),
                ConfigError, "launch", "--launcher must be auto, openmpi, mpich, pals, srun or direct, got \"{}\"",
                req.launcher);
  PARALLM_CHECK(!req.command.empty(), ConfigError, "launch", "no command to launch (write it after --)");
  PARALLM_CHECK(req.n == -1 || req.n >= 1, ConfigError, "launch", "-n must be at least 1, got {}", req.n);
  PARALLM_CHECK(req.ppn == -1 || req.ppn >= 1, ConfigError, "launch", "--ppn must be at least 1, got {}", req.ppn);
}

// p.mode, from --launcher and the job this runs in; returns the hostfile
// (--hostfile, or a PBS job's node file; "" for none).
std::string pick_launch_mode(const LaunchRequest& req, const comm::EnvLookup& env, LaunchPlan& p) {
  const bool automatic = req.launcher == "auto";
  std::string hostfile = req.hostfile;
  if (req.launcher == "direct") {
    p.mode = "direct";
  } else if (req.launcher == "srun" || (automatic && hostfile.empty() && env("SLURM_JOB_ID"))) {
    p.mode = "slurm";
  } else if (automatic && hostfile.empty() && env("PBS_NODEFILE") && *env("PBS_NODEFILE")) {
    p.mode = "pbs";
    hostfile = env("PBS_NODEFILE");
  } else {
    p.mode = hostfile.empty() ? "local" : "hostfile";
  }
  return hostfile;
}

// Nodes, ranks per node, ranks.
void size_launch(const LaunchRequest& req, const comm::EnvLookup& env, const Machine& m, const std::string& hostfile,
                 LaunchPlan& p) {
  Hostfile hf;
  if (!hostfile.empty()) {
    hf = parse_hostfile(m.read_file(hostfile), hostfile);
    p.nodes = static_cast<int>(hf.hosts.size());
  } else if (p.mode == "slurm") {
    const int job = std::max(1, std::max(env_count(env, "SLURM_JOB_NUM_NODES"), env_count(env, "SLURM_NNODES")));
    p.nodes = job - static_cast<int>(req.exclude.size());
    PARALLM_CHECK(p.nodes >= 1, ConfigError, "launch", "the Slurm job has {} node{}, all of them excluded", job,
                  job == 1 ? "" : "s");
  }
  if (p.mode == "local" || p.mode == "direct") {
    p.ranks = req.n > 0 ? req.n : 1;
    p.ppn = p.ranks;
    PARALLM_CHECK(req.ppn == -1 || req.ppn == p.ranks, ConfigError, "launch",
                  "--ppn {} needs several nodes: give --hostfile, or run inside a Slurm or PBS job", req.ppn);
    return;
  }
  const int slurm_ppn = p.mode == "slurm" ? env_count(env, "SLURM_NTASKS_PER_NODE") : -1;
  const int slurm_n = p.mode == "slurm" ? env_count(env, "SLURM_NTASKS") : -1;
  if (req.ppn > 0)
    p.ppn = req.ppn;
  else if (req.n > 0)
    p.ppn = (req.n + p.nodes - 1) / p.nodes;
  else if (slurm_ppn > 0)
    p.ppn = slurm_ppn;
  else if (slurm_n > 0)
    p.ppn = (slurm_n + p.nodes - 1) / p.nodes;
  else
    p.ppn = 1;
  p.ranks = req.n > 0 ? req.n : (slurm_n > 0 && req.ppn < 0 ? slurm_n : p.nodes * p.ppn);
  PARALLM_CHECK(p.ranks <= p.nodes * p.ppn, ConfigError, "launch",
                "-n {} is more than {} node{} x {} ranks per node; raise --ppn or give more nodes", p.ranks, p.nodes,
                p.nodes == 1 ? "" : "s", p.ppn);
}

// The MPI launcher's command line (mpiexec or mpirun and their options, not
// the command): ranks bound to their `threads` cores when they fit.
std::vector<std::string> mpi_launcher_argv(const comm::EnvLookup& env, const Machine& m, MpiFlavor flavor,
                                           const std::string& hostfile, const LaunchPlan& p, bool fits) {
  const std::string n = std::to_string(p.ranks), ppn = std::to_string(p.ppn), t = std::to_string(p.threads);
  std::vector<std::string> a;
  if (flavor == MpiFlavor::Pals) {
    a = {"mpiexec", "-n", n, "--ppn", ppn};
    if (!hostfile.empty()) a.insert(a.end(), {"--hostfile", hostfile});
    a.insert(a.end(), {"--depth", t, "--cpu-bind", "depth", "--env", "OMP_NUM_THREADS=" + t});
  } else if (flavor == MpiFlavor::Mpich) {
    const std::string bin = first_on_path(m, {"mpiexec.mpich", "mpiexec.hydra", "mpiexec"});
    PARALLM_CHECK(!bin.empty(), ConfigError, "launch", "no mpiexec on PATH (apt-get install mpich)");
    a = {bin, "-n", n, "-ppn", ppn};
    if (!hostfile.empty()) a.insert(a.end(), {"-f", hostfile});
    if (fits) a.insert(a.end(), {"-bind-to", "core:" + t});
    a.insert(a.end(), {"-genv", "OMP_NUM_THREADS", t});
  } else if (flavor == MpiFlavor::OpenMpi) {
    const std::string bin = first_on_path(m, {"mpirun.openmpi", "mpirun"});
    PARALLM_CHECK(!bin.empty(), ConfigError, "launch", "no mpirun on PATH (apt-get install openmpi-bin)");
    a = {bin, "-n", n};
    if (m.root) a.push_back("--allow-run-as-root");
    if (!hostfile.empty()) a.insert(a.end(), {"--hostfile", hostfile});
    // Each rank bound to its own `threads` cores when they fit; otherwise ranks share cores unbound.
    if (fits)
      a.insert(a.end(), {"--map-by", fmt::format("ppr:{}:node:PE={}", p.ppn, p.threads), "--bind-to", "core"});
    else
      a.insert(a.end(), {"--map-by", fmt::format("ppr:{}:node", p.ppn), "--oversubscribe", "--bind-to", "none"});
    // Remote ranks get only the environment mpirun forwards.
    for (const char* var : {"OMP_NUM_THREADS", "LOG_FROM_ALL_RANKS", "OPENBLAS_CORETYPE", "PARALLM_PROFILE",
                            "PARALLM_COMM_POLL_US", "PARALLM_GEMM"})
      if (std::string(var) == "OMP_NUM_THREADS" || env(var)) a.insert(a.end(), {"-x", var});
  } else {
    throw ConfigError("launch",
                      "parallm was built without MPI, so it cannot run several ranks; install libopenmpi-dev "
                      "openmpi-bin and rebuild, or pass --launcher openmpi|mpich|pals|srun");
  }
  return a;
}

}  // namespace

LaunchPlan plan_launch(const LaunchRequest& req, const comm::EnvLookup& env, const Machine& m) {
  check_launch_request(req);
  LaunchPlan p;
  const bool automatic = req.launcher == "auto";

  // Already one rank of a launched job: launching again would nest jobs.
  if (const comm::EnvRank er = comm::env_rank(env); automatic && er.size >= 1) {
    p.mode = "inside";
    p.why = fmt::format("already rank {} of {} of a launched job ({}): running the command directly", er.rank, er.size,
                        er.source);
    p.ranks = er.size;
    p.argv = req.command;
    return p;
  }

  const std::string hostfile = pick_launch_mode(req, env, p);
  size_launch(req, env, m, hostfile, p);

  // Threads per rank: the cores of a node shared by its ranks, unless the user chose.
  const char* omp = env("OMP_NUM_THREADS");
  p.threads = omp && *omp ? to_count(omp, "OMP_NUM_THREADS") : std::max(1, m.cores / p.ppn);
  p.env.emplace_back("OMP_NUM_THREADS", std::to_string(p.threads));
  const bool fits = p.ppn * p.threads <= m.cores;

  if (p.mode == "direct" || (p.mode == "local" && p.ranks == 1)) {
    PARALLM_CHECK(p.ranks == 1, ConfigError, "launch", "--launcher direct runs one process, not -n {}", p.ranks);
    p.why = "one rank on this host: running the command directly";
    p.argv = req.command;
    return p;
  }

  MpiFlavor flavor = m.flavor;
  if (req.launcher == "openmpi") flavor = MpiFlavor::OpenMpi;
  if (req.launcher == "mpich") flavor = MpiFlavor::Mpich;
  if (req.launcher == "pals") flavor = MpiFlavor::Pals;
  const std::string where =
      p.mode == "slurm" ? fmt::format("Slurm job {}", env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : "")
      : p.mode == "pbs" ? fmt::format("PBS job {} (nodes from {})", env("PBS_JOBID") ? env("PBS_JOBID") : "", hostfile)
      : p.mode == "local" ? std::string("this host")
                          : fmt::format("hostfile {}", hostfile);
  p.why =
      fmt::format("{}: {} rank{} on {} node{} ({} per node, {} thread{} each)", where, p.ranks, p.ranks == 1 ? "" : "s",
                  p.nodes, p.nodes == 1 ? "" : "s", p.ppn, p.threads, p.threads == 1 ? "" : "s");

  std::vector<std::string>& a = p.argv;
  if (p.mode == "slurm")
    a = srun_argv(req, env, m, flavor, p);
  else
    a = mpi_launcher_argv(env, m, flavor, hostfile, p, fits);
  a.insert(a.end(), req.extra.begin(), req.extra.end());
  a.insert(a.end(), req.command.begin(), req.command.end());
  return p;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += shell_quote(a);
  }
  return s;
}

}  // namespace parallm::cli
