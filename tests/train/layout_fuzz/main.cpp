// layout_fuzz: issue 44's layout fuzzer. Each case, named by its seed, draws
// a tiny model and two parallel layouts from the whole space parallm
// supports, trains the model at the first, resumes its checkpoint at the
// second, and compares every step's loss and gradient norm and the final
// parameters with one rank's run of the same global batch; an invalid
// variant of the layout must be refused by a ConfigError naming a key,
// before anything is written.
//   layout_fuzz --seed S [--keep]              one case (a failure's replay)
//   layout_fuzz --cases N --first-seed S       seeds S..S+N-1
//   layout_fuzz --cases N --from-commit        seeds from this build's git revision (CI)
//   --budget-s T: start no case after T seconds; --dry-run: print the cases' commands only.
// Exit status 0 when every case passed, 1 when any failed, 2 for bad arguments.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/build_info.h"
#include "train/layout_fuzz/fuzz_case.h"

using namespace layout_fuzz;
namespace fs = std::filesystem;

namespace {

struct Args {
  uint64_t first = 0;
  long cases = 1;
  bool from_commit = false, dry_run = false, quiet = false;
  double budget_s = 0;          // 0: none
  double lr = 0;                // 0: the drawn one
  long iters1 = 0, iters2 = 0;  // 0: the drawn ones
  bool dp2 = false;             // the drift measurement: dp 2 (plain DDP) then one rank, instead of the drawn layouts
  Options opt;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = s.find(sep, at);
    const std::string part = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!part.empty()) out.push_back(part);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "layout_fuzz: %s\nusage: layout_fuzz [--seed S | --first-seed S --cases N | --from-commit --cases N] "
               "[--budget-s T] [--keep] [--dry-run] [--quiet] [--work DIR] [--parallm PATH] [--mpirun PATH] "
               "[--mpirun-flags 'F...'] [--timeout-s T] [--tol X] [--param-tol X]\n",
               problem.c_str());
  std::exit(2);
}

double number(const std::string& flag, const char* v) {
  char* end = nullptr;
  const double d = v ? std::strtod(v, &end) : 0;
  if (!v || *end || !(d >= 0)) usage(flag + " needs a number >= 0");
  return d;
}

Args parse(int argc, char** argv) {
  Args a;
  a.opt.self = argv[0];
  a.opt.tools.parallm = PARALLM_FUZZ_PARALLM;
  a.opt.tools.mpirun = PARALLM_FUZZ_MPIRUN;
  a.opt.tools.mpirun_flags = split(PARALLM_FUZZ_MPIRUN_FLAGS, ' ');
  a.opt.work = (fs::temp_directory_path() / fmt::format("layout_fuzz_{}", ::getpid())).string();
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto take = [&] {
      if (!v) usage(f + " needs a value");
      ++i;
      return std::string(v);
    };
    if (f == "--seed" || f == "--first-seed") {
      a.first = static_cast<uint64_t>(number(f, v));
      ++i;
    } else if (f == "--cases") {
      a.cases = static_cast<long>(number(f, v));
      ++i;
    } else if (f == "--budget-s") {
      a.budget_s = number(f, v), ++i;
    } else if (f == "--timeout-s") {
      a.opt.tools.timeout_s = number(f, v), ++i;
    } else if (f == "--tol") {
      a.opt.tol = number(f, v), ++i;
    } else if (f == "--param-tol") {
      a.opt.param_tol = number(f, v), ++i;
    } else if (f == "--work") {
      a.opt.work = take();
    } else if (f == "--parallm") {
      a.opt.tools.parallm = take();
    } else if (f == "--mpirun") {
      a.opt.tools.mpirun = take();
    } else if (f == "--mpirun-flags") {
      a.opt.tools.mpirun_flags = split(take(), ' ');
    } else if (f == "--lr") {
      a.lr = number(f, v), ++i;
    } else if (f == "--iters") {
      const std::vector<std::string> n = split(take(), ',');
      if (n.size() != 2) usage("--iters needs N1,N2");
      a.iters1 = std::stol(n[0]);
      a.iters2 = std::stol(n[1]);
      if (a.iters1 < 0 || a.iters2 <= a.iters1) usage("--iters needs 0 <= N1 < N2");
    } else if (f == "--dp2") {
      a.dp2 = true;
    } else if (f == "--from-commit") {
      a.from_commit = true;
    } else if (f == "--keep") {
      a.opt.keep = true;
    } else if (f == "--dry-run") {
      a.dry_run = true;
    } else if (f == "--quiet") {
      a.quiet = true;
    } else {
      usage("unknown argument " + f);
    }
  }
  // What a replay of one case needs besides its seed (the options that change a case or its verdict).
  if (a.lr > 0) a.opt.replay_args += fmt::format(" --lr {}", a.lr);
  if (a.iters2 > 0) a.opt.replay_args += fmt::format(" --iters {},{}", a.iters1, a.iters2);
  if (a.dp2) a.opt.replay_args += " --dp2";
  if (a.opt.tol != Options{}.tol) a.opt.replay_args += fmt::format(" --tol {}", a.opt.tol);
  if (a.opt.param_tol != Options{}.param_tol) a.opt.replay_args += fmt::format(" --param-tol {}", a.opt.param_tol);
  if (a.from_commit) {  // the first 8 hex digits of the revision: each commit fuzzes its own seeds
    const std::string rev = parallm::build_info().git_revision;
    a.first = rev.size() >= 8 && rev != "unknown" ? std::stoull(rev.substr(0, 8), nullptr, 16) : 44000;
    std::printf("layout_fuzz: seeds from the revision %s\n", rev.c_str());
  }
  return a;
}

// What the cases drew, feature by feature (the space actually covered).
struct Coverage {
  std::map<std::string, int> n;
  void add(const Layout& l) {
    ++n[fmt::format("W={}", l.world)];
    if (l.dp > 1) ++n["dp>1"];
    if (l.ep > 1) ++n["ep>1"];
    if (l.tp > 1) ++n["tp>1"];
    if (l.sp) ++n["sequence_parallel"];
    if (l.pp > 1) ++n["pp " + l.schedule];
    if (l.virt > 1) ++n["pp_virtual>1"];
    if (!l.pp_layers.empty()) ++n["pp_layers"];
    if (l.cp > 1) ++n["cp " + l.cp_kind];
    ++n[fmt::format("zero={}", l.zero)];
    if (l.offload != "none") ++n["offload " + l.offload];
    if (l.deterministic) ++n["deterministic"];
    if (l.recompute != "none") ++n["recompute " + l.recompute];
  }
  void add(const Case& c) {
    add(c.first);
    add(c.resumed);
    if (c.train.gas > 1) ++n["gas>1"];
    if (c.model.bias) ++n["bias"];
    if (!c.model.tied) ++n["untied"];
    if (c.model.arch != "gpt2") ++n["arch " + c.model.arch];
    if (c.model.arch != "gpt2" && c.model.n_kv_head < c.model.n_head) ++n["grouped-query"];
    if (c.model.moe_experts > 0) ++n["mixture of experts"];
    if (c.model.dropout > 0) ++n["dropout>0"];
    if (c.train.grad_clip > 0) ++n["grad_clip"];
    if (c.train.loss_scale != "off") ++n["loss_scale " + c.train.loss_scale];
    ++n[std::string("invalid ") + (c.invalid.on_resume ? "on resume" : "from scratch")];
  }
  std::string text() const {
    std::string s;
    for (const auto& [k, v] : n) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", k, v);
    return s;
  }
};

// The drawn case with the command line's overrides: the learning rate, the
// iterations, and (--dp2, the drift measurement) plain dp 2 then one rank.
Case with_args(Case c, const Args& a) {
  if (a.lr > 0) c.train.lr = a.lr;
  if (a.iters2 > 0) c.train.iters1 = a.iters1, c.train.iters2 = a.iters2;
  if (a.dp2) {
    Layout dp2;
    dp2.world = dp2.dp = 2;
    dp2.batch = c.first.batch;
    c.train.global_batch = 2 * dp2.batch;
    c.first = dp2;
    c.resumed = Layout{};
    c.resumed.batch = c.train.global_batch;
    c.invalid.on_resume = false;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  std::printf("layout_fuzz: %ld case(s) from seed %llu; parallm %s; work %s\n", a.cases,
              static_cast<unsigned long long>(a.first), a.opt.tools.parallm.c_str(), a.opt.work.c_str());
  std::fflush(stdout);
  std::optional<Fuzzer> fuzzer;
  try {
    fuzzer.emplace(a.opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "layout_fuzz: %s\n", e.what());
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  long ran = 0, failed = 0;
  double worst_loss = 0, worst_grad = 0, worst_params = 0;
  std::string worst_params_at;
  uint64_t worst_loss_seed = 0, worst_grad_seed = 0;
  Coverage cov;
  std::vector<uint64_t> failures;
  for (long i = 0; i < a.cases; ++i) {
    if (a.budget_s > 0 && elapsed() > a.budget_s) {
      std::printf("layout_fuzz: time budget of %.0f s reached: %ld of %ld cases started\n", a.budget_s, ran, a.cases);
      break;
    }
    const uint64_t seed = a.first + static_cast<uint64_t>(i);
    const Case c = with_args(draw_case(seed), a);
    cov.add(c);
    if (a.dry_run) {
      std::printf("case %llu: %s\n  first: %s\n  resumed: %s\n  invalid: %s%s\n%s",
                  static_cast<unsigned long long>(seed), describe(c.model, c.train).c_str(), describe(c.first).c_str(),
                  describe(c.resumed).c_str(), c.invalid.what.c_str(), c.invalid.on_resume ? " (on resume)" : "",
                  fuzzer->commands(c).c_str());
      ++ran;
      continue;
    }
    const Outcome o = fuzzer->run_case(c);
    ++ran;
    if (o.loss > worst_loss) worst_loss = o.loss, worst_loss_seed = seed;
    if (o.grad > worst_grad) worst_grad = o.grad, worst_grad_seed = seed;
    if (o.params > worst_params) {
      worst_params = o.params;
      worst_params_at = fmt::format("case {}: {}", seed, o.params_at);
    }
    if (!o.ok) {
      ++failed;
      failures.push_back(seed);
      std::printf("%s", o.report.c_str());
    } else if (!a.quiet) {
      std::printf(
          "case %llu ok %.1f s: %s -> %s | loss %.2g grad %.2g params %.2g%s\n", static_cast<unsigned long long>(seed),
          o.seconds, describe(c.first).c_str(), describe(c.resumed).c_str(), o.loss, o.grad, o.params,
          o.flip >= 0 ? fmt::format(" | MoE routing flip at step {} (compared at 1e-3 from there)", o.flip).c_str()
                      : "");
    }
    std::fflush(stdout);
  }
  std::printf("layout_fuzz: %ld case(s) in %.1f s (%.2f s a case), %ld failed%s\n", ran, elapsed(),
              ran ? elapsed() / static_cast<double>(ran) : 0.0, failed, failed ? ":" : "");
  for (uint64_t s : failures) std::printf("  seed %llu\n", static_cast<unsigned long long>(s));
  std::printf(
      "layout_fuzz: largest relative differences: loss %.3g (case %llu), grad_norm %.3g (case %llu), parameters %.3g "
      "(%s)\n",
      worst_loss, static_cast<unsigned long long>(worst_loss_seed), worst_grad,
      static_cast<unsigned long long>(worst_grad_seed), worst_params, worst_params_at.c_str());
  std::printf("layout_fuzz: drawn: %s\n", cov.text().c_str());
  if (failed == 0 && !a.opt.keep) fs::remove_all(a.opt.work);
  return failed ? 1 : 0;
}
