// A case's runs and comparisons. The reference is one rank with the whole
// global micro-batch (model.batch_size = dp x micro-batch) and the same
// optimizer.gas, trained straight through both legs (iterations
// 0..iters2), saving a step checkpoint before iteration iters1 + 1 and
// after its last; the first leg must equal its first iters1 + 1 steps and
// that checkpoint, the resumed leg its remaining steps and its last
// checkpoint. Every run evaluates (train.eval_iters = 1) before iterations
// 0 and iters1 + 1: the first leg at 0, the resumed leg at its first
// iteration. Steps: relative difference of the loss and of the gradient norm
// (before clipping), and evaluations' train and val loss, at most opt.tol. Parameters: per tensor, the root
// mean square of the difference in units of the learning rate (AdamW moves
// each element by about one learning rate a step, so a wrong update shows as
// O(1)), at most opt.param_tol. A relative bar per element or per tensor
// would trip on AdamW's amplification: an element whose gradient is a sum
// cancelling near its rounding error moves by lr x g / (|g| + eps), and
// where |g| ~ eps a rounding of 1e-10 in g moves it by 1e-2 lr (measured:
// 8.5e-7 in a zero-initialised bias of norm 0.015 at lr 1e-3, dp 2 against
// one rank, while every loss agreed within 1.2e-7).
// Mixtures of experts: a token whose top-k scores tie within rounding may
// choose another expert than in the reference once the layouts' rounding
// has grown (docs/moe.md, "Routing flips"), a discontinuity no rounding bar
// absorbs. The records' choices (every token's, hashed: moe_choices) and
// tokens per expert show it: from the first step where either differs from
// one rank's, the steps and evaluations are held to kFlipTol and the
// parameters to kFlipParamTol, and the case says where it flipped. Choices
// that differ at step 0 (the same weights everywhere) fail.
#include "train/layout_fuzz/fuzz_case.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "train/layout_fuzz/corpus.h"

namespace layout_fuzz {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The keys of how a run is carried out: its directory, iterations, evaluation and checkpoints.
std::vector<std::string> run_keys(const std::string& data, const fs::path& out, long max_iters, bool resume,
                                  long ckpt_every, long eval_every) {
  return {"data.dir=" + data,
          "train.out_dir=" + out.string(),
          fmt::format("train.max_iters={}", max_iters),
          std::string("train.init_from=") + (resume ? "resume" : "scratch"),
          fmt::format("train.eval_interval={}", eval_every),
          "train.eval_iters=1",
          "train.final_eval=false",
          "train.log_interval=1000",
          "train.sample_tokens=0",
          "train.progress=false",
          "train.check_replicas=1",  // every copy that ranks must hold alike, compared after each update
          "train.peak_flops=1e11",
          "train.threads=1",
          "train.keep_checkpoints=10",
          fmt::format("train.checkpoint_interval={}", ckpt_every),
          "comm.timeout_s=60"};
}

Layout one_rank(const Case& c) {
  Layout l;
  l.batch = c.train.global_batch;
  return l;
}

constexpr double kFlipTol = 1e-3, kFlipParamTol = 0.5;

struct Check {
  bool ok = true;
  std::string first;  // the first mismatch
  double loss = 0, grad = 0, params = 0;
  long flip = -1;         // MoE: the first step whose choices differ from one rank's (-1: none)
  std::string params_at;  // where the largest parameter difference is
  void fail(const std::string& s) {
    if (ok) first = s;
    ok = false;
  }
};

double rel(double a, double b) {
  return a == b ? 0 : std::fabs(a - b) / std::fabs(b);
}

void compare_steps(const std::map<long, StepRecord>& got, const std::map<long, StepRecord>& want, long lo, long hi,
                   double tol, const std::string& leg, Check& k) {
  for (long s = lo; s <= hi; ++s) {
    const auto g = got.find(s), w = want.find(s);
    if (g == got.end() || w == want.end()) {
      k.fail(
          fmt::format("{}: step {} has no train record in {}", leg, s, g == got.end() ? "the run" : "the reference"));
      return;
    }
    if (g->second.moe_tokens != w->second.moe_tokens || g->second.moe_choices != w->second.moe_choices) {
      if (s == 0)
        k.fail(
            fmt::format("{}: step 0: the choices (tokens per expert {}, digest {}) differ from one rank's ({}, {}) "
                        "(the same weights: a routing bug)",
                        leg, g->second.moe_tokens, g->second.moe_choices, w->second.moe_tokens, w->second.moe_choices));
      if (k.flip < 0) k.flip = s;
    }
    if (k.flip >= 0 && s >= k.flip) tol = std::max(tol, kFlipTol);
    const double dl = rel(g->second.loss, w->second.loss), dg = rel(g->second.grad_norm, w->second.grad_norm);
    k.loss = std::max(k.loss, dl);
    k.grad = std::max(k.grad, dg);
    if (!(dl <= tol))
      k.fail(fmt::format("{}: step {}: loss {:.9g}, one rank {:.9g} (relative difference {:.3g} > {:.0e})", leg, s,
                         g->second.loss, w->second.loss, dl, tol));
    if (!(dg <= tol))
      k.fail(fmt::format("{}: step {}: grad_norm {:.9g}, one rank {:.9g} (relative difference {:.3g} > {:.0e})", leg, s,
                         g->second.grad_norm, w->second.grad_norm, dg, tol));
  }
}

// The evaluations at the same steps: train and val loss (each over train.eval_iters fixed batches).
void compare_evals(const std::map<long, StepRecord>& got, const std::map<long, StepRecord>& want, double tol,
                   const std::string& leg, Check& k) {
  if (got.empty()) k.fail(leg + ": no evaluation record");
  for (const auto& [s, g] : got) {
    const auto w = want.find(s);
    if (w == want.end()) {
      k.fail(fmt::format("{}: the reference has no evaluation at step {}", leg, s));
      continue;
    }
    const double bar = k.flip >= 0 && s >= k.flip ? std::max(tol, kFlipTol) : tol;
    for (const auto& [what, a, b] :
         {std::tuple{"train", g.loss, w->second.loss}, std::tuple{"val", g.val_loss, w->second.val_loss}}) {
      const double d = rel(a, b);
      k.loss = std::max(k.loss, d);
      if (!(d <= bar))
        k.fail(
            fmt::format("{}: evaluation at step {}: {} loss {:.9g}, one rank {:.9g} (relative difference {:.3g} > "
                        "{:.0e})",
                        leg, s, what, a, b, d, bar));
    }
  }
}

// Elements [lo, hi) of a tensor that the loss does not depend on: the key
// part of each attention's c_attn.bias (the middle third; q, k, v in that
// order). It adds q_i . b_k to every score of query i, the same for every key,
// which the softmax cancels: its gradient is 0 in exact arithmetic, so its
// value is rounding noise that AdamW normalises into steps of up to 1e-2 lr
// and more, different in every layout (measured: 5.0e-6 at lr 1e-3 in a key
// bias, where the rest of the model agreed within 1e-6).
std::pair<long, long> free_elements(const Params::Tensor& t) {
  const std::string suffix = ".attn.c_attn.bias";
  const bool key_bias = t.name.size() > suffix.size() &&
                        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0 && t.numel % 3 == 0;
  return key_bias ? std::pair{t.numel / 3, 2 * t.numel / 3} : std::pair{0L, 0L};
}

void compare_params(const Params& got, const Params& want, double lr, double tol, const std::string& leg, Check& k) {
  if (k.flip >= 0) tol = std::max(tol, kFlipParamTol);
  if (got.flat.size() != want.flat.size() || got.tensors.size() != want.tensors.size()) {
    k.fail(fmt::format("{}: the checkpoint holds {} parameters in {} tensors, one rank's {} in {}", leg,
                       got.flat.size(), got.tensors.size(), want.flat.size(), want.tensors.size()));
    return;
  }
  for (size_t t = 0; t < want.tensors.size(); ++t) {
    const Params::Tensor& w = want.tensors[t];
    if (got.tensors[t].name != w.name || got.tensors[t].offset != w.offset) {
      k.fail(fmt::format("{}: parameter table differs at {} ({} vs {})", leg, t, got.tensors[t].name, w.name));
      return;
    }
    double d2 = 0, dmax = 0;
    long at = 0;
    const auto [skip_lo, skip_hi] = free_elements(w);
    for (long i = w.offset; i < w.offset + w.numel; ++i) {
      if (i - w.offset >= skip_lo && i - w.offset < skip_hi) continue;
      const double a = got.flat[static_cast<size_t>(i)], b = want.flat[static_cast<size_t>(i)], d = std::fabs(a - b);
      d2 += d * d;
      if (!(d <= dmax)) dmax = d, at = i - w.offset;
    }
    const double r = std::sqrt(d2 / static_cast<double>(std::max<long>(w.numel - (skip_hi - skip_lo), 1))) / lr;
    if (r > k.params) {
      k.params = r;
      k.params_at = fmt::format("{} {} (max abs diff {:.3g} at element {} of {})", leg, w.name, dmax, at, w.numel);
    }
    if (!(r <= tol))
      k.fail(
          fmt::format("{}: parameter {} differs from one rank's: rms difference {:.3g} learning rates > {:.0e} "
                      "(largest at element {}: {:.9g}, one rank {:.9g})",
                      leg, w.name, r, tol, at, got.flat[static_cast<size_t>(w.offset + at)],
                      want.flat[static_cast<size_t>(w.offset + at)]));
  }
}

// The run's refusal: a ConfigError (exit code 2 on every rank) whose message names one of `names`.
std::string refusal_problem(const RunResult& r, const std::vector<std::string>& names) {
  if (r.timed_out) return "it did not end (killed at the time limit)";
  if (r.rc == 0) return "it ran (exit 0)";
  if (r.rc != 2 || r.output.find("error: [") == std::string::npos)
    return fmt::format("exit {} is not a ConfigError's (2)", r.rc);
  for (const std::string& n : names)
    for (size_t at = r.output.find(n); at != std::string::npos; at = r.output.find(n, at + 1)) {
      const char next = at + n.size() < r.output.size() ? r.output[at + n.size()] : ' ';
      if (!std::isalnum(static_cast<unsigned char>(next)) && next != '_') return "";
    }
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : " or ") + n;
  return "the error names none of " + all;
}

// Every file under `dir` with its size and modification time: what "unchanged" is checked against.
std::string snapshot(const fs::path& dir) {
  std::string s;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const auto& e = *it;
    s += e.path().lexically_relative(dir).string();
    if (e.is_regular_file(ec))
      s += fmt::format(" {} {}", e.file_size(ec), e.last_write_time(ec).time_since_epoch().count());
    s += "\n";
  }
  return s;
}

std::string tail_lines(const std::string& s, int n) {
  size_t at = s.size();
  for (int i = 0; i <= n && at != std::string::npos && at > 0; ++i) at = s.rfind('\n', at - 1);
  return at == std::string::npos ? s : s.substr(at + 1);
}

Command ref_command(const std::string& data, const Case& c, const std::string& out) {
  return {1,
          std::vector<std::string>{"train"} + model_keys(c.model, c.train) + layout_keys(one_rank(c)) +
              run_keys(data, out, c.train.iters2, false, c.train.iters1 + 1, c.train.iters1 + 1),
          out + ".log"};
}

Command leg_command(const std::string& data, const Case& c, const Layout& l, const std::string& out, long iters,
                    bool resume) {
  return {l.world,
          std::vector<std::string>{"train"} + model_keys(c.model, c.train) + layout_keys(l) +
              run_keys(data, out, iters, resume, 0, c.train.iters1 + 1),
          out + ".log"};
}

// One case's runs after the reference, each leg adding its command line to
// `lines` and its differences to `k` (nothing more runs after a failure).
struct CaseRun {
  const Options& opt;
  const std::string& data;
  const Case& c;
  const fs::path dir;
  const std::string ref;
  std::vector<std::string> lines;
  Check k;

  std::string first_ckpt() const { return step_ckpt((dir / "first").string(), c.train.iters1 + 1); }
  // Runs `cmd`; true if it exited 0, else the failure is recorded.
  bool ran(const std::string& leg, const Command& cmd) {
    const RunResult r = run(opt.tools, cmd);
    if (r.rc == 0) return true;
    k.fail(fmt::format("{} failed (exit {}{}):\n{}", leg, r.rc, r.timed_out ? ", killed at the time limit" : "",
                       tail_lines(r.output, 8)));
    return false;
  }
  // The first leg: iterations 0..iters1 from scratch.
  void first_leg() {
    const long n1 = c.train.iters1;
    const std::string out = (dir / "first").string();
    const Command a = leg_command(data, c, c.first, out, n1, false);
    lines.push_back("first leg: " + shell_line(opt.tools, a));
    if (!ran("first leg", a)) return;
    compare_steps(read_steps(out), read_steps(ref), 0, n1, opt.tol, "first leg", k);
    compare_evals(read_steps(out, "eval"), read_steps(ref, "eval"), opt.tol, "first leg", k);
    compare_params(read_params(step_ckpt(out, n1 + 1)), read_params(step_ckpt(ref, n1 + 1)), c.train.lr, opt.param_tol,
                   "first leg", k);
  }
  // The invalid draw: refused by a ConfigError naming a key, and nothing written.
  void invalid() {
    const Invalid& inv = c.invalid;
    const fs::path out = dir / "invalid";
    std::string before;
    if (inv.on_resume) {
      fs::create_directories(out);
      fs::copy(first_ckpt(), out / fs::path(first_ckpt()).filename(), fs::copy_options::recursive);
      before = snapshot(out);
    }
    const Command bad{
        inv.world,
        std::vector<std::string>{"train"} + with_overrides(model_keys(c.model, c.train), inv.model_over) + inv.keys +
            run_keys(data, out, inv.on_resume ? c.train.iters2 : c.train.iters1, inv.on_resume, 0, c.train.iters1 + 1),
        (dir / "invalid.log").string()};
    const std::string line = shell_line(opt.tools, bad);
    lines.push_back(inv.on_resume ? fmt::format("invalid ({}), resumed: mkdir -p {} && cp -r {} {}/ && {}", inv.what,
                                                out.string(), first_ckpt(), out.string(), line)
                                  : fmt::format("invalid ({}): {}", inv.what, line));
    const RunResult r = run(opt.tools, bad);
    const std::string problem = refusal_problem(r, inv.names);
    if (!problem.empty())
      k.fail(fmt::format("invalid draw ({}) not refused as it should be: {}\n{}", inv.what, problem,
                         tail_lines(r.output, 6)));
    else if (!inv.on_resume && fs::exists(out))
      k.fail(fmt::format("invalid draw ({}) refused, but it created {}", inv.what, out.string()));
    else if (inv.on_resume && snapshot(out) != before)
      k.fail(fmt::format("invalid draw ({}) refused on resume, but it changed {}:\nbefore:\n{}after:\n{}", inv.what,
                         out.string(), before, snapshot(out)));
  }
  // The resumed leg: iterations iters1 + 1..iters2 at the second layout.
  void resumed_leg() {
    const long n1 = c.train.iters1, n2 = c.train.iters2;
    const fs::path out = dir / "resumed";
    fs::create_directories(out);
    fs::copy(first_ckpt(), out / fs::path(first_ckpt()).filename(), fs::copy_options::recursive);
    const Command b = leg_command(data, c, c.resumed, out.string(), n2, true);
    lines.push_back(fmt::format("resumed leg: mkdir -p {} && cp -r {} {}/ && {}", out.string(), first_ckpt(),
                                out.string(), shell_line(opt.tools, b)));
    if (!ran("resumed leg", b)) return;
    compare_steps(read_steps(out.string()), read_steps(ref), n1 + 1, n2, opt.tol, "resumed leg", k);
    compare_evals(read_steps(out.string(), "eval"), read_steps(ref, "eval"), opt.tol, "resumed leg", k);
    compare_params(read_params(step_ckpt(out.string(), n2 + 1)), read_params(step_ckpt(ref, n2 + 1)), c.train.lr,
                   opt.param_tol, "resumed leg", k);
  }
};

}  // namespace

Fuzzer::Fuzzer(Options opt) : opt_(std::move(opt)) {
  set_run_environment();
  fs::create_directories(fs::path(opt_.work) / "refs");
  const fs::path text = fs::path(opt_.work) / "corpus.txt";
  std::ofstream(text) << corpus_text();
  data_ = (fs::path(opt_.work) / "data").string();
  fs::remove_all(data_);
  const Command prep{
      1, {"prepare", "char", "--input", text.string(), "--out", data_}, (fs::path(opt_.work) / "prepare.log").string()};
  const RunResult r = run(opt_.tools, prep);
  if (r.rc != 0)
    throw std::runtime_error("preparing the corpus failed: " + shell_line(opt_.tools, prep) + "\n" + r.output);
}

std::string Fuzzer::reference(const Case& c, std::string* line, std::string* error) {
  std::string id = fmt::format("{} {}", c.train.iters1, c.train.iters2);
  for (const std::string& k : model_keys(c.model, c.train) + layout_keys(one_rank(c))) id += " " + k;
  const auto hit = refs_.find(id);
  const std::string out =
      hit != refs_.end() ? hit->second : (fs::path(opt_.work) / "refs" / fmt::format("ref-{}", next_ref_++)).string();
  const Command cmd = ref_command(data_, c, out);
  *line = shell_line(opt_.tools, cmd);
  if (hit != refs_.end()) return out;
  fs::remove_all(out);
  const RunResult r = run(opt_.tools, cmd);
  if (r.rc != 0) {
    *error = fmt::format("the one-rank reference failed (exit {}):\n{}", r.rc, tail_lines(r.output, 8));
    return out;
  }
  refs_[id] = out;
  return out;
}

std::string Fuzzer::commands(const Case& c) {
  const fs::path dir = fs::path(opt_.work) / fmt::format("case-{}", c.seed);
  const std::string first = (dir / "first").string(), resumed = (dir / "resumed").string();
  std::string s = "  reference (1 rank): " +
                  shell_line(opt_.tools, ref_command(data_, c, (fs::path(opt_.work) / "refs" / "ref").string())) + "\n";
  s += "  first leg: " + shell_line(opt_.tools, leg_command(data_, c, c.first, first, c.train.iters1, false)) + "\n";
  s += fmt::format("  resumed leg: mkdir -p {0} && cp -r {1} {0}/ && {2}\n", resumed,
                   step_ckpt(first, c.train.iters1 + 1),
                   shell_line(opt_.tools, leg_command(data_, c, c.resumed, resumed, c.train.iters2, true)));
  return s;
}

Outcome Fuzzer::run_case(const Case& c) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = fs::path(opt_.work) / fmt::format("case-{}", c.seed);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string ref_line, error;
  const std::string ref = reference(c, &ref_line, &error);
  CaseRun run{opt_, data_, c, dir, ref, {"reference (1 rank): " + ref_line}, {}};
  if (!error.empty()) run.k.fail(error);
  try {
    if (run.k.ok) run.first_leg();
    if (run.k.ok) run.invalid();
    if (run.k.ok) run.resumed_leg();
  } catch (const std::exception& e) {
    run.k.fail(std::string("reading a run's results failed: ") + e.what());
  }
  const Check& k = run.k;
  Outcome o{k.ok, "", k.loss, k.grad, k.params, k.params_at, 0, k.flip};
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!k.ok) {
    o.report = fmt::format(
        "FAIL case {}: {}\n  model: {}\n  first layout: {}\n  resumed layout: {}\n  invalid draw: {}{}\n  replay: {} "
        "--seed {}{} --keep   (this case's directories are kept in {})\n  commands:\n",
        c.seed, k.first, describe(c.model, c.train), describe(c.first), describe(c.resumed), c.invalid.what,
        c.invalid.on_resume ? " (on resume)" : "", opt_.self, c.seed, opt_.replay_args, dir.string());
    for (const std::string& l : run.lines) o.report += "    " + l + "\n";
  } else if (!opt_.keep) {
    fs::remove_all(dir);
  }
  return o;
}

}  // namespace layout_fuzz
