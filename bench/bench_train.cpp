// Training throughput, parallm against PyTorch, measured one after the other
// in the same run on the same model, batch, data and thread count.
//
//   build/bench/bench_train [--configs a,b,c] [--iters N] [--warmup W]
//                           [--peer-iters N] [--peer all|quick|none] [--threads T]
//                           [--dtype fp32|bf16]
//
// Configs: (a) nanoGPT's CPU config 4/4/128, block 64, batch 12, vocab 65;
// (b) baby GPT 6/6/384, block 256, batch 64, vocab 65; (c) GPT-2 124M shape
// 12/12/768, block 64, batch 4, vocab 50304, bias. (a) and (b) read tiny
// Shakespeare when it is prepared (data/shakespeare_char), else random tokens.
//
// The peer is tools/torch_ref/bench_peer.py under /usr/bin/python3, run at its
// best: every variant of its settings is tried (OPENBLAS_CORETYPE unset, torch
// intra-op threads 1 or all, the pthread or OpenMP OpenBLAS build) and the
// fastest counts. parallm runs in this process's environment as it is.
// parallm is timed before and after the peer (the better run counts, as the
// peer's best setting does), since machine speed drifts over minutes.
// Printed per config: tokens/s of each, the ratio, achieved GFLOP/s
// (nanoGPT's 6N + 12LHQT per token) and its fraction of the measured sgemm peak.
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

#include "core/profiler.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "kernels/matmul.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "train/peak.h"

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
  return {{"a", mk(4, 4, 128, 64, 65, false), 12, true},
          {"b", mk(6, 6, 384, 256, 65, false), 64, true},
          {"c", mk(12, 12, 768, 64, 50304, true), 4, false}};
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

std::vector<PeerVariant> peer_variants(int threads, bool quick) {
  const std::string omp_dir = "/usr/lib/x86_64-linux-gnu/openblas-openmp";
  const std::string pth_dir = "/usr/lib/x86_64-linux-gnu/openblas-pthread";
  std::vector<PeerVariant> v;
  if (fs::exists(omp_dir))
    v.push_back({"openblas-openmp, intra-op " + std::to_string(threads), {"LD_LIBRARY_PATH=" + omp_dir}, threads});
  if (fs::exists(pth_dir))
    v.push_back({"openblas-pthread, intra-op 1",
                 {"LD_LIBRARY_PATH=" + pth_dir, "OPENBLAS_NUM_THREADS=" + std::to_string(threads)},
                 1});
  // OpenBLAS picks its kernels from the CPU's model; on CPUs it does not know
  // (AMD Zen 4 reads as Cooperlake in 0.3.21) a named core type can be faster.
  if (fs::exists(omp_dir) && !quick)
    for (const char* core : {"Haswell", "Zen"})
      v.push_back({std::string("openblas-openmp, intra-op ") + std::to_string(threads) + ", OPENBLAS_CORETYPE=" + core,
                   {"LD_LIBRARY_PATH=" + omp_dir, std::string("OPENBLAS_CORETYPE=") + core},
                   threads});
  if (v.empty())
    std::fprintf(stderr,
                 "bench_train: warning: no OpenBLAS (%s, %s); the peer runs on the system BLAS, which may be the slow "
                 "reference one: apt-get install libopenblas0-pthread libopenblas0-openmp for a fair peer\n",
                 omp_dir.c_str(), pth_dir.c_str());
  if (v.empty() || !quick) {
    v.push_back({"system BLAS, intra-op " + std::to_string(threads), {}, threads});
    v.push_back({"system BLAS, intra-op 1, OMP passive", {"OMP_WAIT_POLICY=PASSIVE"}, 1});
  }
  return v;
}

Result run_peer(const BenchConfig& bc, const std::string& data_dir, int iters, int threads, bool quick,
                const std::string& script, const std::string& dtype) {
  Result best;
  for (const auto& var : peer_variants(threads, quick)) {
    std::vector<std::string> argv{"env", "-u", "OPENBLAS_CORETYPE"};
    for (const auto& e : var.env) argv.push_back(e);
    for (const std::string& a : {std::string("/usr/bin/python3"), script,
                                 std::string("--n_layer"),        std::to_string(bc.m.n_layer),
                                 std::string("--n_head"),         std::to_string(bc.m.n_head),
                                 std::string("--n_embd"),         std::to_string(bc.m.n_embd),
                                 std::string("--block_size"),     std::to_string(bc.m.block_size),
                                 std::string("--batch_size"),     std::to_string(bc.batch),
                                 std::string("--vocab_size"),     std::to_string(bc.m.vocab_size),
                                 std::string("--bias"),           std::string(bc.m.bias ? "1" : "0"),
                                 std::string("--iters"),          std::to_string(iters),
                                 std::string("--warmup"),         std::string("1"),
                                 std::string("--intra_threads"),  std::to_string(var.intra_threads),
                                 std::string("--dtype"),          dtype})
      argv.push_back(a);
    if (bc.use_shakespeare && fs::exists(data_dir + "/train.bin")) {
      argv.push_back("--data");
      argv.push_back(data_dir + "/train.bin");
    }
    const std::string out = run_capture(argv);
    auto pos = out.rfind('{');
    if (pos == std::string::npos) {
      fmt::print("  peer [{}]: no result (is python3-torch installed?)\n", var.label);
      continue;
    }
    auto j = nlohmann::json::parse(out.substr(pos), nullptr, false);
    if (j.is_discarded() || !j.contains("tokens_per_s")) continue;
    const double tps = j["tokens_per_s"].get<double>();
    fmt::print("  peer [{}]: {:.0f} tokens/s\n", var.label, tps);
    std::fflush(stdout);
    if (tps > best.tokens_per_s) best = {tps, j["s_per_iter"].get<double>()};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"parallm vs PyTorch training throughput"};
  std::string configs = "a,b,c", peer = "all", data_dir = "data/shakespeare_char";
  int iters = 20, warmup = 2, peer_iters = 0, threads = 0;
  app.add_option("--configs", configs, "comma-separated subset of a,b,c");
  app.add_option("--iters", iters, "timed parallm iterations");
  app.add_option("--warmup", warmup, "untimed parallm iterations first");
  app.add_option("--peer-iters", peer_iters, "timed PyTorch iterations (default: per config)");
  app.add_option("--peer", peer, "all (every peer setting, keep the best) | quick | none")
      ->check(CLI::IsMember({"all", "quick", "none"}));
  app.add_option("--threads", threads, "threads for both (default: all cores)");
  app.add_option("--data", data_dir, "prepared tiny Shakespeare");
  std::string dtype_s = "fp32";
  app.add_option("--dtype", dtype_s, "fp32, or bf16 mixed precision on both sides")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  std::string script = PARALLM_SOURCE_DIR "/tools/torch_ref/bench_peer.py";
  app.add_option("--peer-script", script, "the PyTorch peer (default: the one in this source tree)");
  CLI11_PARSE(app, argc, argv);
  if (threads <= 0) threads = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  set_num_threads(threads);

  const DType dtype = parse_dtype(dtype_s);
  const bool bf16 = dtype == DType::BF16;
  const double peak = train::measure_gemm_flops(threads, 1.0, bf16);
  const double fma_peak = fma_peak_flops(threads);
  fmt::print(
      "threads {} | dtype {} | measured {} peak (oneDNN, 1024^3): {:.1f} GFLOP/s | fp32 FMA ceiling (loop): "
      "{:.1f} GFLOP/s | kernels {} | OPENBLAS_CORETYPE={}\n",
      threads, dtype_s, bf16 ? "bf16 GEMM" : "fp32 sgemm", peak / 1e9, fma_peak / 1e9, kernels::cpu_kernel_isa(),
      std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(unset)");
  nlohmann::json report = nlohmann::json::array();
  for (const auto& bc : all_configs()) {
    if (configs.find(bc.name) == std::string::npos) continue;
    model::GPT probe(bc.m, 1, 1);
    const double fpt = probe.flops_per_token(bc.m.block_size);
    fmt::print("\n({}) {} | batch {} | {:.2f}M params (nanoGPT count)\n", bc.name, bc.m.summary(), bc.batch,
               probe.num_params_nanogpt() / 1e6);
    std::fflush(stdout);
    const int it = bc.name == "a" ? iters * 5 : iters;
    prof::reset();
    Result ours = run_parallm(bc, data_dir, it, warmup, dtype);
    if (prof::enabled()) fmt::print("{}", prof::table());
    fmt::print("  parallm: {:.0f} tokens/s ({:.3f} s/iter), {:.1f} GFLOP/s = {:.1f}% of {} peak\n", ours.tokens_per_s,
               ours.s_per_iter, ours.tokens_per_s * fpt / 1e9, 100 * ours.tokens_per_s * fpt / peak,
               bf16 ? "bf16 GEMM" : "sgemm");
    std::fflush(stdout);
    nlohmann::json rec{{"config", bc.name},
                       {"parallm_tokens_per_s", ours.tokens_per_s},
                       {"parallm_gflops", ours.tokens_per_s * fpt / 1e9},
                       {"peak_gflops", peak / 1e9},
                       {"fma_peak_gflops", fma_peak / 1e9},
                       {"dtype", dtype_s}};
    if (peer != "none") {
      const int pit = peer_iters > 0 ? peer_iters : bc.name == "a" ? 40 : bc.name == "b" ? 3 : 6;
      Result theirs = run_peer(bc, data_dir, pit, threads, peer == "quick", script, dtype_s);
      // Machine speed drifts over minutes: time parallm again after the peer
      // and keep its better run, as the peer keeps its best setting.
      Result again = run_parallm(bc, data_dir, it, warmup, dtype);
      fmt::print("  parallm again after the peer: {:.0f} tokens/s\n", again.tokens_per_s);
      if (again.tokens_per_s > ours.tokens_per_s) ours = again;
      rec["parallm_tokens_per_s"] = ours.tokens_per_s;
      rec["parallm_gflops"] = ours.tokens_per_s * fpt / 1e9;
      if (theirs.tokens_per_s > 0) {
        fmt::print("  pytorch (best): {:.0f} tokens/s ({:.3f} s/iter), {:.1f} GFLOP/s = {:.1f}% of {} peak\n",
                   theirs.tokens_per_s, theirs.s_per_iter, theirs.tokens_per_s * fpt / 1e9,
                   100 * theirs.tokens_per_s * fpt / peak, bf16 ? "bf16 GEMM" : "sgemm");
        fmt::print("  parallm (best of 2): {:.0f} tokens/s | ratio parallm / pytorch: {:.2f}x\n", ours.tokens_per_s,
                   ours.tokens_per_s / theirs.tokens_per_s);
        rec["pytorch_tokens_per_s"] = theirs.tokens_per_s;
        rec["ratio"] = ours.tokens_per_s / theirs.tokens_per_s;
        if (!bf16 && fma_peak > 0) {
          // What this machine allows at all: a step whose every flop ran at the
          // FMA ceiling, against the peer as measured (fp32 only: the ceiling
          // is the fp32 FMA loop's).
          const double theirs_flops = theirs.tokens_per_s * fpt;
          fmt::print(
              "  FMA ceiling: parallm at {:.1f}% of it, pytorch at {:.1f}%; a step at the ceiling would be "
              "{:.2f}x pytorch\n",
              100 * ours.tokens_per_s * fpt / fma_peak, 100 * theirs_flops / fma_peak, fma_peak / theirs_flops);
          rec["ratio_at_fma_ceiling"] = fma_peak / theirs_flops;
        }
      }
    }
    report.push_back(rec);
    std::fflush(stdout);
  }
  fmt::print("\n{}\n", report.dump());
  return 0;
}
