// Child processes: fork, a process group of their own (so a hung mpirun and
// its ranks are killed together at the time limit), stdout and stderr into a
// log file; the results read back through parallm's own readers.
#include "train/layout_fuzz/run.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/ckpt_dirs.h"

namespace layout_fuzz {

namespace {

const char* const kEnv[][2] = {
    {"OMP_NUM_THREADS", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};

std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string tail_of(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  return all.size() > max_bytes ? all.substr(all.size() - max_bytes) : all;
}

}  // namespace

void set_run_environment() {
  for (const auto& kv : kEnv) ::setenv(kv[0], kv[1], 1);
}

std::vector<std::string> argv_of(const Tools& t, const Command& c) {
  std::vector<std::string> argv;
  if (c.world > 1) {
    argv = {t.mpirun, "-np", std::to_string(c.world)};
    argv.insert(argv.end(), t.mpirun_flags.begin(), t.mpirun_flags.end());
  }
  argv.push_back(t.parallm);
  argv.insert(argv.end(), c.args.begin(), c.args.end());
  return argv;
}

std::string shell_line(const Tools& t, const Command& c) {
  std::string s;
  for (const auto& kv : kEnv) s += std::string(kv[0]) + "=" + kv[1] + " ";
  for (const std::string& a : argv_of(t, c)) s += quoted(a) + " ";
  s.pop_back();
  return s;
}

RunResult run(const Tools& t, const Command& c) {
  const std::vector<std::string> argv = argv_of(t, c);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const int fd = ::open(c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + c.log);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "layout_fuzz: cannot run %s\n", cargv[0]);
    ::_exit(127);
  }
  ::close(fd);
  ::setpgid(pid, pid);  // as the child does: whichever runs first
  RunResult r;
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (w == pid) break;
    if (r.seconds > t.timeout_s && !r.timed_out) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);  // mpirun and every rank
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(r.seconds < 1 ? 5 : 20));
  }
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = tail_of(c.log, 64 * 1024);
  return r;
}

std::map<long, StepRecord> read_steps(const std::string& out_dir, const std::string& kind) {
  std::map<long, StepRecord> steps;
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("kind", "") != kind) continue;
    StepRecord s;
    s.loss = j.at("loss").get<double>();
    if (j.contains("grad_norm")) s.grad_norm = j["grad_norm"].get<double>();
    if (j.contains("val_loss")) s.val_loss = j["val_loss"].get<double>();
    if (j.contains("moe_tokens")) s.moe_tokens = j["moe_tokens"].dump();
    if (j.contains("moe_choices")) s.moe_choices = j["moe_choices"].get<std::string>();
    steps[j.at("step").get<long>()] = s;
  }
  return steps;
}

Params read_params(const std::string& ckpt_dir) {
  namespace fs = std::filesystem;
  const fs::path p(ckpt_dir);
  const parallm::train::CkptDir dir(p.parent_path().string(), p.filename().string());
  const nlohmann::json meta = parallm::train::read_checkpoint_meta(dir);
  Params out;
  out.flat.resize(meta.at("flat_size").get<size_t>());
  parallm::train::read_checkpoint_range(meta, parallm::train::CkptPart::Params, 0,
                                        static_cast<int64_t>(out.flat.size()), out.flat.data());
  for (const auto& s : meta.at("params")) {
    long numel = 1;
    for (const auto& d : s.at("shape")) numel *= d.get<long>();
    out.tensors.push_back({s.at("name").get<std::string>(), s.at("offset").get<long>(), numel});
  }
  return out;
}

std::string step_ckpt(const std::string& out_dir, long next) {
  return parallm::train::step_checkpoint(out_dir, next).path();
}

}  // namespace layout_fuzz
