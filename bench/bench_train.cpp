// Training throughput, parallm against PyTorch, measured one after the other
// in the same run on the same model, batch, data and thread count.
//
//   build/bench/bench_train [--configs a,b,c] [--iters N] [--warmup W]
//                           [--peer-iters N] [--peer all|quick|none] [--threads T]
//                           [--dtype fp32|bf16]
//
// Configs: (a) nanoGPT's CPU config 4/4/128, block 64, batch 12, vocab 65;
// (b) baby GPT 6/6/384, block 256, batch 64, vocab 65; (c) GPT-2 124M shape
// 12/12/768, block 64, batch 4, vocab 50304, bias; (l, not in the default
// set) the small Llama of configs/llama_tiny_cpu.yaml against the peer's
// Llama (tools/torch_ref/llama_ref.py). (a), (b) and (l) read tiny
// Shakespeare when it is prepared (data/shakespeare_char), else random tokens.
//
// The peer is tools/torch_ref/bench_peer.py under /usr/bin/python3, run at its
// best: every variant of its settings is tried (OPENBLAS_CORETYPE unset or a
// named core type, torch intra-op threads 1 or all usable cores, OpenMP
// threads spinning or OMP_WAIT_POLICY=PASSIVE, the pthread or OpenMP OpenBLAS
// build) and the fastest counts. parallm runs in this process's environment
// as it is. parallm is timed before and after the peer (the better run counts,
// as the peer's best setting does), since machine speed drifts over minutes.
// Printed per config: tokens/s of each, the peer's winning setting, the ratio,
// achieved GFLOP/s (nanoGPT's 6N + 12LHQT per token) and its fraction of the
// measured sgemm peak; at the end a table of every peer setting's tokens/s
// with the winner marked.
// The header also prints the cores' fp32 FMA ceiling (a loop of independent
// vector FMAs), the bound no GEMM on them can pass; in fp32, each side's
// fraction of it is printed too, with the ratio a step running wholly at the
// ceiling would reach over the peer: the most any implementation could show
// against that peer on that machine.
// --dtype bf16 runs both sides in bf16 mixed precision: parallm's bf16
// products (train.dtype=bf16) against torch.autocast(cpu, bfloat16), and the
// peak is then the measured bf16 GEMM's.
#include <fcntl.h>
#include <fmt/format.h>
#include <omp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/host.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "train/records/peak.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

extern char** environ;
using namespace parallm;
namespace fs = std::filesystem;

namespace {

struct BenchConfig {
  std::string name;
  model::GPTConfig m;
  int64_t batch;
  bool use_shakespeare;
};

std::vector<BenchConfig> all_configs() {
  auto mk = [](int64_t L, int64_t H, int64_t C, int64_t T, int64_t V, bool bias) {
    model::GPTConfig g;
    g.n_layer = L;
    g.n_head = H;
    g.n_embd = C;
    g.block_size = T;
    g.vocab_size = V;
    g.bias = bias;
    g.dropout = 0.0f;
    return g;
  };
  // (l) configs/llama_tiny_cpu.yaml's Llama: (a)'s size with 2 KV heads of 32, SwiGLU 352, an untied head.
  model::GPTConfig l = mk(4, 4, 128, 64, 65, false);
  l.arch = model::Arch::Llama;
  l.n_kv_head = 2;
  l.head_dim = 32;
  l.intermediate_size = 352;
  l.tie_embeddings = false;
  return {{"a", mk(4, 4, 128, 64, 65, false), 12, true},
          {"b", mk(6, 6, 384, 256, 65, false), 64, true},
          {"c", mk(12, 12, 768, 64, 50304, true), 4, false},
          {"l", l, 12, true}};
}

struct Result {
  double tokens_per_s = 0, s_per_iter = 0;
};

#if defined(__x86_64__)
// fp32 FLOPs of `iters` rounds of 12 independent FMA chains (enough to cover
// the latency of two FMA ports), AVX-512 or AVX2; the result keeps the loop alive.
__attribute__((target("avx512f"))) double fma_chains_512(long iters, float* sink) {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(0.001f * static_cast<float>(j));
  const __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], b, c);
  float out[16];
  for (int j = 1; j < 12; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  _mm512_storeu_ps(out, a[0]);
  *sink = out[0];
  return 12.0 * 32.0 * static_cast<double>(iters);
}
__attribute__((target("avx2,fma"))) double fma_chains_256(long iters, float* sink) {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(0.001f * static_cast<float>(j));
  const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], b, c);
  float out[8];
  for (int j = 1; j < 12; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  _mm256_storeu_ps(out, a[0]);
  *sink = out[0];
  return 12.0 * 16.0 * static_cast<double>(iters);
}
#endif

// The best of 3 runs of every thread looping at once (0 on CPUs with neither).
double fma_peak_flops(int threads) {
#if !defined(__x86_64__)
  (void)threads;
  return 0;
#else
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("fma")) return 0;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double flops = 0;
    Timer t;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    {
      float sink = 0;
      flops += avx512 ? fma_chains_512(20000000, &sink) : fma_chains_256(20000000, &sink);
      if (sink == 12345.0f) flops += 1;  // never; keeps the chains' result used
    }
    best = std::max(best, flops / t.seconds());
  }
  return best;
#endif
}

// parallm: full training steps (forward, backward, clip, AdamW) in this process.
Result run_parallm(const BenchConfig& bc, const std::string& data_dir, int iters, int warmup, DType dtype) {
  const int64_t B = bc.batch, T = bc.m.block_size, V = bc.m.vocab_size;
  model::GPT m(bc.m, B, T, Device::cpu(), {true, true, dtype});
  m.init_weights(1337);
  optim::AdamW opt(m.layout(), {1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f});
  std::unique_ptr<data::Loader> loader;
  if (bc.use_shakespeare && fs::exists(data_dir + "/train.bin"))
    loader = std::make_unique<data::Loader>(data_dir, V, data::BatchSpec{B, T, 1, 0}, 1337);
  std::vector<int32_t> x(B * T), y(B * T);
  Timer total;
  for (int it = 0; it < warmup + iters; ++it) {
    if (it == warmup) total.reset();
    if (loader) {
      loader->get(data::Split::Train, it, 0, x.data(), y.data());
    } else {
      for (int64_t i = 0; i < B * T; ++i) {
        x[i] = static_cast<int32_t>(random_below(V, 7, stream_id(kRngTest, it), 2 * i));
        y[i] = static_cast<int32_t>(random_below(V, 7, stream_id(kRngTest, it), 2 * i + 1));
      }
    }
    model::StepContext ctx{true, true, 1337, static_cast<uint64_t>(it), 1.0f, nullptr, 0};
    m.zero_grad();
    m.forward(x.data(), y.data(), B, T, ctx);
    m.backward(x.data(), B, T, ctx);
    const double norm = optim::global_norm(m.grads(), m.flat_size());
    // As the trainer: AdamW writes a bf16 model's weight copy, or the model redraws it.
    bfloat16* copy = m.weight_copy_for_step();
    opt.step(m.params(), m.grads(), 1e-3f, optim::clip_factor(norm, 1.0f), copy);
    if (!copy) m.params_changed();
  }
  const double s = total.seconds() / iters;
  return {static_cast<double>(B * T) / s, s};
}

// Runs argv (no shell) and returns its stdout; stderr passes through.
std::string run_capture(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  std::string out;
  if (rc == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    int status = 0;
    waitpid(pid, &status, 0);
  }
  close(fds[0]);
  return out;
}

struct PeerVariant {
  std::string label;
  std::vector<std::string> env;  // NAME=VALUE settings
  int intra_threads;
};

// Every setting of the peer worth trying (--peer quick: the first three that
// exist). torch's intra-op threads are an OpenMP pool; beside the pthread
// OpenBLAS, whose own threads do the products, that pool's threads spin
// between parallel regions unless OMP_WAIT_POLICY=PASSIVE puts them to sleep.
std::vector<PeerVariant> peer_variants(int threads, bool quick) {
  const std::string omp_dir = "/usr/lib/x86_64-linux-gnu/openblas-openmp";
  const std::string pth_dir = "/usr/lib/x86_64-linux-gnu/openblas-pthread";
  const std::string all = "intra-op " + std::to_string(threads), passive = "OMP_WAIT_POLICY=PASSIVE";
  const std::string omp_lib = "LD_LIBRARY_PATH=" + omp_dir, pth_lib = "LD_LIBRARY_PATH=" + pth_dir;
  const std::string pth_threads = "OPENBLAS_NUM_THREADS=" + std::to_string(threads);
  std::vector<PeerVariant> v;
  if (fs::exists(omp_dir)) v.push_back({"openblas-openmp, " + all, {omp_lib}, threads});
  if (fs::exists(pth_dir)) {
    v.push_back({"openblas-pthread, intra-op 1", {pth_lib, pth_threads}, 1});
    v.push_back({"openblas-pthread, " + all + ", OMP passive", {pth_lib, pth_threads, passive}, threads});
  }
  if (fs::exists(omp_dir) && !quick) {
    v.push_back({"openblas-openmp, " + all + ", OMP passive", {omp_lib, passive}, threads});
    // OpenBLAS picks its kernels from the CPU's model; on CPUs it does not know
    // (AMD Zen 4 reads as Cooperlake in 0.3.21) a named core type can be faster.
    for (const std::string core : {"Haswell", "Zen"})
      v.push_back(
          {"openblas-openmp, " + all + ", OPENBLAS_CORETYPE=" + core, {omp_lib, "OPENBLAS_CORETYPE=" + core}, threads});
  }
  if (v.empty())
    std::fprintf(stderr,
                 "bench_train: warning: no OpenBLAS (%s, %s); the peer runs on the system BLAS, which may be the slow "
                 "reference one: apt-get install libopenblas0-pthread libopenblas0-openmp for a fair peer\n",
                 omp_dir.c_str(), pth_dir.c_str());
  if (v.empty() || !quick) {
    v.push_back({"system BLAS, " + all, {}, threads});
    v.push_back({"system BLAS, intra-op 1, OMP passive", {passive}, 1});
    v.push_back({"system BLAS, " + all + ", OMP passive", {passive}, threads});
  }
  return v;
}

struct PeerRequest {
  const BenchConfig& bc;
  std::string data_dir, script, dtype;
  int iters;
};

// The peer's command line for one setting. OPENBLAS_CORETYPE and
// OMP_WAIT_POLICY are cleared first, so each setting is what its label says.
std::vector<std::string> peer_argv(const PeerRequest& rq, const PeerVariant& var) {
  const auto& m = rq.bc.m;
  std::vector<std::string> argv{"env", "-u", "OPENBLAS_CORETYPE", "-u", "OMP_WAIT_POLICY"};
  argv.insert(argv.end(), var.env.begin(), var.env.end());
  argv.insert(argv.end(), {"/usr/bin/python3", rq.script,
                           "--n_layer",        std::to_string(m.n_layer),
                           "--n_head",         std::to_string(m.n_head),
                           "--n_embd",         std::to_string(m.n_embd),
                           "--block_size",     std::to_string(m.block_size),
                           "--batch_size",     std::to_string(rq.bc.batch),
                           "--vocab_size",     std::to_string(m.vocab_size),
                           "--bias",           m.bias ? "1" : "0",
                           "--iters",          std::to_string(rq.iters),
                           "--warmup",         "1",
                           "--intra_threads",  std::to_string(var.intra_threads),
                           "--dtype",          rq.dtype});
  if (rq.bc.use_shakespeare && fs::exists(rq.data_dir + "/train.bin"))
    argv.insert(argv.end(), {"--data", rq.data_dir + "/train.bin"});
  if (m.llama()) {
    argv.insert(argv.end(), {"--arch", "llama", "--n_kv_head", std::to_string(m.kv_heads()), "--head_dim",
                             std::to_string(m.head_size()), "--intermediate_size", std::to_string(m.mlp_width()),
                             "--rope_theta", std::to_string(m.rope_theta)});
    if (m.qk_norm()) argv.push_back("--qk_norm");
    if (!m.tie_embeddings) argv.push_back("--untied");
  }
  return argv;
}

struct PeerRun {
  std::string label;
  Result r;  // tokens_per_s 0: the setting gave no result
};

struct PeerResult {
  std::vector<PeerRun> runs;  // every setting tried, in order
  int best = -1;              // the fastest run; -1 when none gave a result
  Result best_result() const { return best < 0 ? Result{} : runs[static_cast<size_t>(best)].r; }
};

PeerRun run_peer_variant(const PeerRequest& rq, const PeerVariant& var) {
  PeerRun run{var.label, {}};
  const std::string out = run_capture(peer_argv(rq, var));
  if (const auto pos = out.rfind('{'); pos != std::string::npos) {
    auto j = nlohmann::json::parse(out.substr(pos), nullptr, false);
    if (!j.is_discarded() && j.contains("tokens_per_s") && j.contains("s_per_iter"))
      run.r = {j["tokens_per_s"].get<double>(), j["s_per_iter"].get<double>()};
  }
  if (run.r.tokens_per_s > 0)
    fmt::print("  peer [{}]: {:.0f} tokens/s\n", var.label, run.r.tokens_per_s);
  else
    fmt::print("  peer [{}]: no result (is python3-torch installed?)\n", var.label);
  std::fflush(stdout);
  return run;
}

PeerResult run_peer(const PeerRequest& rq, int threads, bool quick) {
  PeerResult res;
  for (const auto& var : peer_variants(threads, quick)) {
    res.runs.push_back(run_peer_variant(rq, var));
    const double best = res.best_result().tokens_per_s;
    if (res.runs.back().r.tokens_per_s > best) res.best = static_cast<int>(res.runs.size()) - 1;
  }
  return res;
}

struct Options {
  std::string configs = "a,b,c", peer = "all", data_dir = "data/shakespeare_char", dtype = "fp32";
  std::string script = PARALLM_SOURCE_DIR "/tools/torch_ref/bench_peer.py";
  int iters = 20, warmup = 2, peer_iters = 0, threads = 0;
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("--configs", o.configs, "comma-separated subset of a,b,c,l");
  app.add_option("--iters", o.iters, "timed parallm iterations");
  app.add_option("--warmup", o.warmup, "untimed parallm iterations first");
  app.add_option("--peer-iters", o.peer_iters, "timed PyTorch iterations (default: per config)");
  app.add_option("--peer", o.peer, "all (every peer setting, keep the best) | quick | none")
      ->check(CLI::IsMember({"all", "quick", "none"}));
  app.add_option("--threads", o.threads, "threads for both (default: all usable cores)");
  app.add_option("--data", o.data_dir, "prepared tiny Shakespeare");
  app.add_option("--dtype", o.dtype, "fp32, or bf16 mixed precision on both sides")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--peer-script", o.script, "the PyTorch peer (default: the one in this source tree)");
}

// What the machine measured at the start: the GEMM peak of the bench's dtype
// and the fp32 FMA ceiling (0 where there is no FMA loop for the CPU).
struct Peaks {
  double gemm = 0, fma = 0;
  bool bf16 = false;
  const char* gemm_name() const { return bf16 ? "bf16 GEMM" : "sgemm"; }
};

// One config's outcome, kept for the summary table.
struct Outcome {
  std::string config;
  double parallm_tokens_per_s = 0;
  PeerResult peer;
};

void print_peer_best(const Outcome& o, double fpt, const Peaks& pk, nlohmann::json& rec) {
  const Result theirs = o.peer.best_result();
  const double ours = o.parallm_tokens_per_s;
  const std::string& label = o.peer.runs[static_cast<size_t>(o.peer.best)].label;
  fmt::print("  pytorch (best: {}): {:.0f} tokens/s ({:.3f} s/iter), {:.1f} GFLOP/s = {:.1f}% of {} peak\n", label,
             theirs.tokens_per_s, theirs.s_per_iter, theirs.tokens_per_s * fpt / 1e9,
             100 * theirs.tokens_per_s * fpt / pk.gemm, pk.gemm_name());
  fmt::print("  parallm (best of 2): {:.0f} tokens/s | ratio parallm / pytorch: {:.2f}x\n", ours,
             ours / theirs.tokens_per_s);
  rec["pytorch_tokens_per_s"] = theirs.tokens_per_s;
  rec["pytorch_best_setting"] = label;
  rec["ratio"] = ours / theirs.tokens_per_s;
  if (pk.bf16 || pk.fma <= 0) return;
  // What this machine allows at all: a step whose every flop ran at the FMA
  // ceiling, against the peer as measured (fp32 only: the ceiling is the fp32
  // FMA loop's).
  const double theirs_flops = theirs.tokens_per_s * fpt;
  fmt::print(
      "  FMA ceiling: parallm at {:.1f}% of it, pytorch at {:.1f}%; a step at the ceiling would be {:.2f}x pytorch\n",
      100 * ours * fpt / pk.fma, 100 * theirs_flops / pk.fma, pk.fma / theirs_flops);
  rec["ratio_at_fma_ceiling"] = pk.fma / theirs_flops;
}

nlohmann::json peer_settings_json(const PeerResult& p) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& run : p.runs)
    a.push_back({{"setting", run.label},
                 {"tokens_per_s", run.r.tokens_per_s > 0 ? nlohmann::json(run.r.tokens_per_s) : nlohmann::json()}});
  return a;
}

// Times parallm, then (unless --peer none) every peer setting and parallm
// again: machine speed drifts over minutes, so parallm's better run counts,
// as the peer's best setting does.
Outcome bench_config(const BenchConfig& bc, const Options& o, const Peaks& pk, nlohmann::json& rec) {
  model::GPT probe(bc.m, 1, 1);
  const double fpt = probe.flops_per_token(bc.m.block_size);
  const DType dtype = parse_dtype(o.dtype);
  fmt::print("\n({}) {} | batch {} | {:.2f}M params (nanoGPT count)\n", bc.name, bc.m.summary(), bc.batch,
             probe.num_params_nanogpt() / 1e6);
  std::fflush(stdout);
  const int it = bc.name == "a" ? o.iters * 5 : o.iters;
  prof::reset();
  Outcome out{bc.name, run_parallm(bc, o.data_dir, it, o.warmup, dtype).tokens_per_s, {}};
  if (prof::enabled()) fmt::print("{}", prof::table());
  const double ours = out.parallm_tokens_per_s;
  fmt::print("  parallm: {:.0f} tokens/s ({:.3f} s/iter), {:.1f} GFLOP/s = {:.1f}% of {} peak\n", ours,
             static_cast<double>(bc.batch * bc.m.block_size) / ours, ours * fpt / 1e9, 100 * ours * fpt / pk.gemm,
             pk.gemm_name());
  std::fflush(stdout);
  rec = {{"config", bc.name},
         {"parallm_tokens_per_s", ours},
         {"parallm_gflops", ours * fpt / 1e9},
         {"peak_gflops", pk.gemm / 1e9},
         {"fma_peak_gflops", pk.fma / 1e9},
         {"dtype", o.dtype}};
  if (o.peer == "none") return out;
  const int pit = o.peer_iters > 0 ? o.peer_iters : bc.name == "a" ? 40 : bc.name == "b" ? 3 : 6;
  out.peer = run_peer({bc, o.data_dir, o.script, o.dtype, pit}, o.threads, o.peer == "quick");
  const double again = run_parallm(bc, o.data_dir, it, o.warmup, dtype).tokens_per_s;
  fmt::print("  parallm again after the peer: {:.0f} tokens/s\n", again);
  out.parallm_tokens_per_s = std::max(ours, again);
  rec["parallm_tokens_per_s"] = out.parallm_tokens_per_s;
  rec["parallm_gflops"] = out.parallm_tokens_per_s * fpt / 1e9;
  rec["pytorch_settings"] = peer_settings_json(out.peer);
  if (out.peer.best >= 0) print_peer_best(out, fpt, pk, rec);
  return out;
}

// Every peer setting's tokens/s beside parallm's best run, the peer's best
// marked: the ratio each setting would have given, so a setting missing from
// the list shows up as the one that wins when it is added.
void print_summary(const std::vector<Outcome>& outs) {
  size_t width = 15;
  for (const auto& o : outs)
    for (const auto& run : o.peer.runs) width = std::max(width, run.label.size());
  bool any = false;
  for (const auto& o : outs) any = any || !o.peer.runs.empty();
  if (!any) return;
  fmt::print("\nsummary (tokens/s; every pytorch setting tried, the best one marked; its ratio is the one above)\n");
  fmt::print("| config | {:<{}} | best | pytorch | parallm | parallm / pytorch |\n", "pytorch setting", width);
  fmt::print("| --- | {:-<{}} | --- | --- | --- | --- |\n", "", width);
  for (const auto& o : outs)
    for (size_t i = 0; i < o.peer.runs.size(); ++i) {
      const PeerRun& run = o.peer.runs[i];
      const bool won = static_cast<int>(i) == o.peer.best;
      const double t = run.r.tokens_per_s;
      fmt::print("| ({}) | {:<{}} | {:<4} | {:>7} | {:>7.0f} | {:>17} |\n", o.config, run.label, width, won ? "*" : "",
                 t > 0 ? fmt::format("{:.0f}", t) : "failed", o.parallm_tokens_per_s,
                 t > 0 ? fmt::format("{:.2f}x", o.parallm_tokens_per_s / t) : "");
    }
}

int run_bench(Options& o) {
  if (o.threads <= 0) o.threads = usable_cores();
  set_num_threads(o.threads);
  Peaks pk;
  pk.bf16 = parse_dtype(o.dtype) == DType::BF16;
  if (pk.bf16) kernels::cpu_bf16_product_ops();  // ConfigError, naming why, without bf16 matrix hardware
  pk.gemm = train::measure_gemm_flops(o.threads, 1.0, pk.bf16);
  pk.fma = fma_peak_flops(o.threads);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  fmt::print(
      "threads {} | dtype {} | measured {} peak (oneDNN, 1024^3): {:.1f} GFLOP/s | fp32 FMA ceiling (loop): "
      "{:.1f} GFLOP/s | kernels {} | OPENBLAS_CORETYPE={}\n",
      o.threads, o.dtype, pk.bf16 ? "bf16 GEMM" : "fp32 sgemm", pk.gemm / 1e9, pk.fma / 1e9, kernels::cpu_kernel_isa(),
      coretype ? coretype : "(unset)");
  nlohmann::json report = nlohmann::json::array();
  std::vector<Outcome> outs;
  for (const auto& bc : all_configs()) {
    if (o.configs.find(bc.name) == std::string::npos) continue;
    nlohmann::json rec;
    outs.push_back(bench_config(bc, o, pk, rec));
    report.push_back(rec);
    std::fflush(stdout);
  }
  print_summary(outs);
  fmt::print("\n{}\n", report.dump());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"parallm vs PyTorch training throughput"};
  Options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);
  try {
    return run_bench(o);
  } catch (const Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 1;
  }
}
