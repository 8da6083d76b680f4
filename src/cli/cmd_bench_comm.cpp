// `parallm bench comm`: collective bandwidth as nccl-tests reports it (size,
// time, algbw, busbw), with the MPI library's own blocking call measured in
// the same run as the peer, and an optional correctness check.
//
// Method: for each size, `warmup` untimed calls, then `rounds` rounds of at
// least `iters` calls (and 10 ms) of parallm's collective and as many of the
// peer's. Within a round the two sides run in alternating blocks of about
// 1 ms (who goes first alternates), so that a drift in machine speed (a VM's
// neighbours, memory bandwidth) hits both alike; each side's time is the sum
// of its blocks, on the slowest rank. Each side reports its best round, and
// the ratio is the median over rounds of peer time / parallm time.
// busbw = algbw x factor, factor 2(n-1)/n for all_reduce, (n-1)/n for
// all_gather, reduce_scatter and all_to_all, 1 for broadcast; size is the
// whole buffer (all_gather: the gathered output; reduce_scatter: the input).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/world.h"
#include "core/error.h"

namespace parallm::cli {

namespace {

struct BenchOptions {
  std::string op = "all_reduce", dtype = "fp32", backend = "auto";
  int64_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20, warmup = 5, rounds = 5;
  bool check = false, peer = true;
  double timeout_s = 300;
};

double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32:
      return t.data<float>()[i];
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
    case DType::I32:
      return t.data<int32_t>()[i];
    case DType::U16:
      return static_cast<const uint16_t*>(t.raw())[i];
  }
  return 0;
}

void put(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::F32:
      t.data<float>()[i] = static_cast<float>(v);
      break;
    case DType::BF16:
      static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(static_cast<float>(v));
      break;
    case DType::I32:
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::U16:
      static_cast<uint16_t*>(t.raw())[i] = static_cast<uint16_t>(v);
      break;
  }
}

// One collective under test: its operands for a size, how to call it, its
// busbw factor, and the pattern that checks it (small integers, exact in every dtype).
struct Case {
  comm::OpKind kind;
  int n, me;
  Tensor in, out;  // views of the preallocated buffers

  void run(comm::Communicator& c) const {
    switch (kind) {
      case comm::OpKind::AllReduce:
        c.all_reduce(in, comm::ReduceOp::Sum);
        break;
      case comm::OpKind::AllGather:
        c.all_gather(in, out);
        break;
      case comm::OpKind::ReduceScatter:
        c.reduce_scatter(in, out, comm::ReduceOp::Sum);
        break;
      case comm::OpKind::Broadcast:
        c.broadcast(in, 0);
        break;
      default:
        c.all_to_all(in, out);
    }
  }
  double bus_factor() const {
    if (kind == comm::OpKind::AllReduce) return 2.0 * (n - 1) / n;
    if (kind == comm::OpKind::Broadcast) return 1.0;
    return static_cast<double>(n - 1) / n;
  }
  void fill() const {
    const int64_t b = in.numel();
    for (int64_t i = 0; i < b; ++i) {
      double v = 0;
      if (kind == comm::OpKind::AllReduce || kind == comm::OpKind::ReduceScatter) v = me + 1 + i % 13;
      if (kind == comm::OpKind::AllGather) v = me + i % 7;
      if (kind == comm::OpKind::Broadcast) v = me == 0 ? static_cast<double>(i % 251) : -1.0;
      if (kind == comm::OpKind::AllToAll) v = me * 7 + (i / (b / n)) + (i % (b / n)) % 5;
      put(in, i, v);
    }
  }
  // Largest deviation from the expected result.
  double error() const {
    const double ranks_sum = n * (n + 1) / 2.0;
    double worst = 0;
    const Tensor& res = kind == comm::OpKind::AllReduce || kind == comm::OpKind::Broadcast ? in : out;
    const int64_t m = res.numel(), block = m / n;
    const int64_t offset = kind == comm::OpKind::ReduceScatter ? m * me : 0;
    for (int64_t j = 0; j < m; ++j) {
      double want = 0;
      if (kind == comm::OpKind::AllReduce) want = ranks_sum + n * (j % 13);
      if (kind == comm::OpKind::ReduceScatter) want = ranks_sum + n * ((offset + j) % 13);
      if (kind == comm::OpKind::AllGather) want = j / block + (j % block) % 7;
      if (kind == comm::OpKind::Broadcast) want = static_cast<double>(j % 251);
      if (kind == comm::OpKind::AllToAll) want = (j / block) * 7 + me + (j % block) % 5;
      worst = std::max(worst, std::fabs(get(res, j) - want));
    }
    return worst;
  }
};

comm::OpKind parse_op(const std::string& s) {
  if (s == "all_reduce") return comm::OpKind::AllReduce;
  if (s == "all_gather") return comm::OpKind::AllGather;
  if (s == "reduce_scatter") return comm::OpKind::ReduceScatter;
  if (s == "broadcast") return comm::OpKind::Broadcast;
  if (s == "all_to_all") return comm::OpKind::AllToAll;
  throw ConfigError("bench.comm",
                    fmt::format("--op must be all_reduce, all_gather, reduce_scatter, broadcast or all_to_all, got "
                                "\"{}\"",
                                s));
}

const char* peer_name(comm::OpKind k) {
  switch (k) {
    case comm::OpKind::AllReduce:
      return "MPI_Allreduce";
    case comm::OpKind::AllGather:
      return "MPI_Allgather";
    case comm::OpKind::ReduceScatter:
      return "MPI_Reduce_scatter_block";
    case comm::OpKind::Broadcast:
      return "MPI_Bcast";
    default:
      return "MPI_Alltoall";
  }
}

std::string human_bytes(int64_t b) {
  if (b >= (1 << 30) && b % (1 << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b >= (1 << 20) && b % (1 << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= (1 << 10) && b % (1 << 10) == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

// Whole-buffer element counts from -b to -e, divisible by n where the op
// splits the buffer into blocks.
std::vector<int64_t> bench_counts(const BenchOptions& o, size_t es, bool blocked, int n) {
  std::vector<int64_t> counts;
  for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes) * 1.0000001; b *= o.factor) {
    int64_t cnt = std::max<int64_t>(1, static_cast<int64_t>(b) / static_cast<int64_t>(es));
    if (blocked) cnt = std::max<int64_t>(n, cnt / n * n);
    if (counts.empty() || counts.back() != cnt) counts.push_back(cnt);
  }
  return counts;
}

void print_bench_header(const BenchOptions& o, comm::Communicator& c, comm::OpKind kind, DType dt, bool peer) {
  const int n = c.size();
  std::printf("# parallm bench comm: %s, %s, %d rank%s (%s%s), >= %d iters (>= 10 ms) x %d rounds, %d warmup\n",
              o.op.c_str(), dtype_name(dt), n, n == 1 ? "" : "s", c.backend().c_str(),
              c.backend() == "mpi" ? (", " + comm::mpi_library_version()).c_str() : "", o.iters, o.rounds, o.warmup);
  std::printf("# %10s %12s %11s %11s %11s", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
  // time and busbw: best round; ratio: median over rounds of peer time / parallm time (1 = as fast).
  if (peer) std::printf(" | %11s %11s %6s", "peer(us)", "peer busbw", "ratio");
  if (o.check) std::printf(" | check");
  std::printf("\n");
  if (peer)
    std::printf("# peer: %s, blocking, on the same ranks; ratio = median over rounds of peer time / our time\n",
                peer_name(kind));
}

// The check of one size: "ok", or the largest error over the ranks (and
// *all_ok turns false).
std::string check_bench_case(comm::Communicator& c, const Case& k, bool* all_ok) {
  k.fill();
  k.run(c);
  const double e = k.error();
  Tensor err = Tensor::empty({1}, DType::F32);
  err.data<float>()[0] = static_cast<float>(e);
  c.all_reduce(err, comm::ReduceOp::Max);
  const bool ok = err.data<float>()[0] == 0.0f;
  *all_ok = *all_ok && ok;
  return ok ? "ok" : fmt::format("FAIL (max error {})", err.data<float>()[0]);
}

// One size's times per call on the slowest rank: each side's best round, and
// the median over rounds of peer time / parallm time.
struct BenchTiming {
  double best = 1e30, best_peer = 1e30, ratio = 0;
};

BenchTiming time_bench_case(comm::Communicator& c, const Case& k, const BenchOptions& o, bool peer,
                            const Tensor& times) {
  // Warm up, and size the rounds to at least 10 ms so timer and scheduler noise stay small.
  const auto w0 = std::chrono::steady_clock::now();
  for (int i = 0; i < std::max(1, o.warmup); ++i) k.run(c);
  times.data<float>()[0] = static_cast<float>(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() / std::max(1, o.warmup));
  c.all_reduce(times, comm::ReduceOp::Max);
  const double t_op = std::max(1e-9, static_cast<double>(times.data<float>()[0]));  // slowest rank, per call
  const int iters = std::max(o.iters, static_cast<int>(std::min(1e5, 0.01 / t_op)));
  if (peer) comm::native_loop(c, k.kind, k.in, k.out, o.warmup);
  // Blocks of about 1 ms per side, alternating within the round.
  const int block = std::clamp(static_cast<int>(1e-3 / t_op), 1, iters);
  BenchTiming t;
  std::vector<double> ratios;
  for (int r = 0; r < o.rounds; ++r) {
    double ours = 0, theirs = 0;
    auto run_ours = [&](int m) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < m; ++i) k.run(c);
      ours += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    c.barrier();
    for (int done = 0, b = 0; done < iters; done += block, ++b) {
      const int m = std::min(block, iters - done);
      // Who goes first alternates, so an advantage of going first or second cancels.
      if (peer && (r + b) % 2 == 1) theirs += comm::native_loop(c, k.kind, k.in, k.out, m);
      run_ours(m);
      if (peer && (r + b) % 2 == 0) theirs += comm::native_loop(c, k.kind, k.in, k.out, m);
    }
    times.data<float>()[0] = static_cast<float>(ours / iters);
    times.data<float>()[1] = static_cast<float>(theirs / iters);
    c.all_reduce(times, comm::ReduceOp::Max);
    t.best = std::min(t.best, static_cast<double>(times.data<float>()[0]));
    t.best_peer = std::min(t.best_peer, static_cast<double>(times.data<float>()[1]));
    ratios.push_back(static_cast<double>(times.data<float>()[1]) / times.data<float>()[0]);
  }
  // The ratio pairs each round's two interleaved measurements and takes
  // the median, so drifts in machine speed cancel.
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  t.ratio = ratios[ratios.size() / 2];
  return t;
}

// One table over `c` (printed where `print`); whether every checked result was right.
bool bench_table(comm::Communicator& c, const BenchOptions& o, comm::OpKind kind, DType dt, bool print) {
  const int n = c.size(), me = c.rank();
  const bool peer = o.peer && c.backend() == "mpi" && dt != DType::BF16 && n > 1;
  const size_t es = dtype_size(dt);
  const bool blocked = kind != comm::OpKind::AllReduce && kind != comm::OpKind::Broadcast;
  const std::vector<int64_t> counts = bench_counts(o, es, blocked, n);
  const int64_t maxc = counts.back();
  Tensor in_buf = Tensor::empty({maxc}, dt), out_buf = Tensor::empty({maxc}, dt);
  Tensor times = Tensor::empty({2}, DType::F32);
  if (print) print_bench_header(o, c, kind, dt, peer);
  bool all_ok = true;
  double sum_ours = 0, sum_peer = 0, sum_ratio = 0;
  int n_big = 0;
  for (const int64_t cnt : counts) {
    Case k{kind, n, me, {}, {}};
    const int64_t in_count = kind == comm::OpKind::AllGather ? cnt / n : cnt;
    const int64_t out_count = kind == comm::OpKind::ReduceScatter ? cnt / n : (blocked ? cnt : 0);
    k.in = in_buf.slice_view(0, {in_count});
    k.out = out_buf.slice_view(0, {out_count});
    const std::string check = o.check ? check_bench_case(c, k, &all_ok) : std::string();
    in_buf.zero();  // timing on zeros: repeated sums stay finite
    const BenchTiming t = time_bench_case(c, k, o, peer, times);
    const double bytes = static_cast<double>(cnt) * static_cast<double>(es);
    const double algbw = bytes / t.best / 1e9, busbw = algbw * k.bus_factor();
    const double peer_bus = bytes / t.best_peer / 1e9 * k.bus_factor();
    if (bytes >= (1 << 20)) {
      sum_ratio += t.ratio;
      sum_ours += busbw;
      sum_peer += peer_bus;
      ++n_big;
    }
    if (print) {
      std::printf("  %10s %12lld %11.1f %11.3f %11.3f", human_bytes(static_cast<int64_t>(bytes)).c_str(),
                  static_cast<long long>(cnt), t.best * 1e6, algbw, busbw);
      if (peer) std::printf(" | %11.1f %11.3f %6.3f", t.best_peer * 1e6, peer_bus, t.ratio);
      if (o.check) std::printf(" | %s", check.c_str());
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (print && n_big > 0) {
    std::printf("# avg busbw at 1 MiB and above: %.3f GB/s", sum_ours / n_big);
    if (peer) std::printf(", peer %.3f GB/s; mean ratio %.3f", sum_peer / n_big, sum_ratio / n_big);
    std::printf("\n");
  }
  if (print && o.check) std::printf("# check: %s\n", all_ok ? "all results correct" : "WRONG RESULTS");
  return all_ok;
}

int bench_comm(const BenchOptions& o) {
  const comm::OpKind kind = parse_op(o.op);
  const DType dt = parse_dtype(o.dtype);
  PARALLM_CHECK(o.min_bytes > 0 && o.max_bytes >= o.min_bytes, ConfigError, "bench.comm",
                "sizes must satisfy 0 < -b ({}) <= -e ({})", o.min_bytes, o.max_bytes);
  PARALLM_CHECK(o.factor > 1, ConfigError, "bench.comm", "-f must be above 1, got {}", o.factor);
  PARALLM_CHECK(o.iters >= 1 && o.rounds >= 1 && o.warmup >= 0, ConfigError, "bench.comm",
                "--iters and --rounds must be at least 1, --warmup at least 0");
  comm::CommOptions copt;
  copt.timeout_s = o.timeout_s;
  World w = start_world(o.backend, copt);
  return run_guarded(w, [&] {
    comm::Communicator& c = *w;
    bool ok = bench_table(c, o, kind, dt, c.rank() == 0);
    // Several hosts with several ranks on some: the same within each host (every host's group at once) and
    // between hosts (a rank of each host per group), reported apart: rank 0's groups.
    const comm::Topology& t = w.topo;
    const bool mixed = t.nodes.size() > 1 && std::any_of(t.ranks.begin(), t.ranks.end(),
                                                         [](const comm::RankPlace& p) { return p.local_size > 1; });
    if (!mixed) return ok ? 0 : 1;
    const comm::RankPlace& me = t.me(c.rank());
    for (const bool intra : {true, false}) {
      auto g = c.split(intra ? me.node : me.local_rank, c.rank(), intra ? "intra_host" : "inter_host");
      if (c.rank() == 0)
        std::printf("# %s: %s\n", intra ? "intra-host" : "inter-host",
                    intra ? "the ranks of each host, every host's group at once (this table: host 0's)"
                          : "one rank of each host per group (this table: local rank 0's)");
      ok &= bench_table(*g, o, kind, dt, c.rank() == 0);
    }
    return ok ? 0 : 1;
  });
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* cmd = bench->add_subcommand("comm", "Collective bandwidth (algbw/busbw) against the MPI library's own call");
  auto o = std::make_shared<BenchOptions>();
  cmd->add_option("--op", o->op, "all_reduce, all_gather, reduce_scatter, broadcast or all_to_all")
      ->capture_default_str();
  const int64_t max_bytes = int64_t{1} << 34;  // 16 GiB a buffer
  cmd->add_option("-b,--minbytes", o->min_bytes, "Smallest size (e.g. 8, 1K, 1M)")
      ->transform(CLI::AsSizeValue(false))
      ->check(int_in(1, max_bytes))
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", o->max_bytes, "Largest size")
      ->transform(CLI::AsSizeValue(false))
      ->check(int_in(1, max_bytes));
  cmd->add_option("-f,--stepfactor", o->factor, "Size multiplier between steps")
      ->check(number_in(1, 1024, true))
      ->capture_default_str();
  cmd->add_option("-n,--iters", o->iters, "Timed calls per round")->check(int_in(1, 1'000'000))->capture_default_str();
  cmd->add_option("-w,--warmup", o->warmup, "Untimed calls first")->check(int_in(0, 1'000'000))->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "Rounds (each side reports its best)")
      ->check(int_in(1, 10'000))
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "fp32, bf16 or int32")->capture_default_str();
  add_world_options(cmd, o->backend, o->timeout_s, "Seconds before a collective is declared hung");
  cmd->add_flag("-c,--check", o->check, "Check every result against the expected values");
  cmd->add_flag("!--no-peer", o->peer, "Skip the MPI library loop");
  cmd->footer("Run on several ranks: parallm launch -n 2 -- parallm bench comm --check");
  return [o]() { return bench_comm(*o); };
}

}  // namespace parallm::cli
