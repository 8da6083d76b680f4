// `parallm test-dist`: the smoke test of distributed training. Every rank
// builds the same MLP (128-1024-512-256-128-128 by default), rank 0's
// weights are broadcast, each rank draws its own random batches, and DDP
// averages the gradients with bucketed all-reduces overlapped with backward;
// AdamW updates. Rank 0 prints iter, loss (mean over ranks), samples/s
// (global), dt, dtf, dtb, and at the end a summary and terminal plots of the
// loss and the step time. The verdict: the loss on a held-out batch (the same
// on every rank) must be lower after training than before, so a broken
// reduction shows; the loss of the training batches, new every iteration,
// is too noisy to judge a short run by.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/textplot.h"
#include "cli/world.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/host.h"
#include "core/rng.h"
#include "core/text.h"
#include "core/threads.h"
#include "core/timer.h"
#include "model/mlp.h"
#include "optim/adamw.h"
#include "parallel/ddp.h"

namespace parallm::cli {

namespace {

struct TestDistOptions {
  std::string backend = "auto";
  double timeout_s = 300;
  int64_t iters = 100;
  int64_t batch = 64;
  std::string dims = "128,1024,512,256,128,128";
  float lr = 1e-3f;
  uint64_t seed = 1337;
  int64_t log_interval = 10;
  double bucket_mb = 25;
  int64_t threads = 0;
  bool plot = true;
};

constexpr int64_t kMaxWidth = 1 << 16;  // --dims: one layer's width
constexpr size_t kMaxDims = 64;         // --dims: widths in all

std::vector<int64_t> parse_dims(const std::string& s) {
  const std::vector<int64_t> dims = parse_int_list(s, "test-dist", "--dims");
  for (int64_t d : dims)
    PARALLM_CHECK(d > 0 && d <= kMaxWidth, ConfigError, "test-dist", "--dims: every width must be in [1, {}], got {}",
                  kMaxWidth, d);
  PARALLM_CHECK(dims.size() >= 2 && dims.size() <= kMaxDims, ConfigError, "test-dist",
                "--dims needs an input and an output width and at most {} in all (e.g. 128,1024,128), got \"{}\"",
                kMaxDims, s);
  return dims;
}

// A batch of inputs and targets, drawn from the data stream of (iteration, rank).
void draw_batch(const TestDistOptions& o, const std::vector<int64_t>& dims, int64_t it, int rank, std::vector<float>& x,
                std::vector<float>& target) {
  const int64_t din = dims.front(), dout = dims.back();
  fill_normal(x.data(), o.batch * din, 0.0f, 1.0f, o.seed, stream_id(kRngData, static_cast<uint64_t>(it), rank));
  if (din != dout)
    fill_normal(target.data(), o.batch * dout, 0.0f, 1.0f, o.seed,
                stream_id(kRngData, static_cast<uint64_t>(it), rank, 1));
}

// Bytes the MLP needs at least: weights, gradients and two AdamW moments,
// and two activations (fp32) per width for the batch; saturating.
uint64_t mlp_bytes(const std::vector<int64_t>& dims, int64_t batch) {
  uint64_t params = 0, widths = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    widths = sat_add(widths, static_cast<uint64_t>(dims[i]));
    if (i + 1 < dims.size())
      params = sat_add(params, sat_mul(static_cast<uint64_t>(dims[i]), static_cast<uint64_t>(dims[i + 1]) + 1));
  }
  return sat_add(sat_mul(16, params), sat_mul(8, sat_mul(widths, static_cast<uint64_t>(batch))));
}

std::vector<int64_t> checked_dims(const TestDistOptions& o) {
  const std::vector<int64_t> dims = parse_dims(o.dims);
  const uint64_t need = mlp_bytes(dims, o.batch), have = physical_memory_bytes();
  PARALLM_CHECK(have == 0 || need <= have, ConfigError, "test-dist",
                "--dims {} with --batch {} needs at least {} of memory, but this machine has {}; use smaller widths "
                "or a smaller batch",
                o.dims, o.batch, need == UINT64_MAX ? std::string("2^64 bytes") : format_bytes(need),
                format_bytes(have));
  return dims;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The first line: the model, the ranks, the batch, the threads and DDP's buckets.
void print_test_dist_start(const TestDistOptions& o, const model::MLP& m, int n, const parallel::DataParallel* ddp) {
  const int64_t B = o.batch;
  std::printf(
      "test-dist: MLP %s (%.2fM parameters), %d rank%s x batch %lld (global %lld), %lld iterations, %d "
      "thread%s per rank%s\n",
      o.dims.c_str(), static_cast<double>(m.num_params()) / 1e6, n, n == 1 ? "" : "s", static_cast<long long>(B),
      static_cast<long long>(B * n), static_cast<long long>(o.iters), num_threads(), num_threads() == 1 ? "" : "s",
      ddp ? fmt::format(", {} gradient bucket{}", ddp->num_buckets(), ddp->num_buckets() == 1 ? "" : "s").c_str() : "");
  std::fflush(stdout);
}

// What every iteration measured: its loss (mean over ranks) and times (ms).
struct TestDistSeries {
  std::vector<double> losses, dts, dtfs, dtbs, comm_ms, exposed_ms;
};

// The summary (medians of the steady state) and the terminal plots.
void print_test_dist_summary(const TestDistOptions& o, const TestDistSeries& s, int n, bool with_ddp) {
  const int64_t B = o.batch;
  // Steady state: the first iterations (allocation, thread start-up) left out of the medians.
  const size_t skip = std::min<size_t>(s.dts.size() - 1, 2);
  auto tail = [&](const std::vector<double>& v) { return std::vector<double>(v.begin() + skip, v.end()); };
  const double dt_med = median(tail(s.dts));
  std::string comm;
  if (with_ddp) {
    const double cm = median(tail(s.comm_ms)), ex = median(tail(s.exposed_ms));
    comm = fmt::format(", all-reduce {:.2f}ms/iter ({:.0f}% not overlapped)", cm,
                       cm > 0 ? 100.0 * std::min(1.0, ex / cm) : 0.0);
  }
  std::printf(
      "test-dist: loss %.4f -> %.4f; median dt %.2fms (dtf %.2fms, dtb %.2fms), %.0f samples/s over %d "
      "rank%s%s\n",
      s.losses.front(), s.losses.back(), dt_med, median(tail(s.dtfs)), median(tail(s.dtbs)),
      static_cast<double>(B * n) / (dt_med / 1e3), n, n == 1 ? "" : "s", comm.c_str());
  if (o.plot) {
    PlotOptions po;
    po.x0 = 1;
    std::fputs(text_plot(s.losses, "loss vs iter", po).c_str(), stdout);
    po.x0 = static_cast<int>(skip) + 1;
    std::fputs(text_plot(tail(s.dts), fmt::format("dt (ms) vs iter (after {} warm-up iterations)", skip), po).c_str(),
               stdout);
  }
  std::fflush(stdout);
}

// The verdict: did the held-out batch's loss fall? (Said by rank 0.)
bool test_dist_verdict(const TestDistOptions& o, float held_before, float held_after, bool lead) {
  const bool fell = held_after < held_before;
  if (lead) {
    std::printf("test-dist: held-out batch loss %.6f -> %.6f after %lld iterations: %s\n", held_before, held_after,
                static_cast<long long>(o.iters), fell ? "training works" : "did not fall");
    std::fflush(stdout);
  }
  if (!fell && lead)
    std::fprintf(stderr, "test-dist: the loss on the held-out batch did not fall (%.6f -> %.6f): training is broken\n",
                 held_before, held_after);
  return fell;
}

int test_dist(const TestDistOptions& o) {
  const std::vector<int64_t> dims = checked_dims(o);  // the other options' ranges are checked by CLI11
  comm::CommOptions copt;
  copt.timeout_s = o.timeout_s;
  World w = start_world(o.backend, copt, true, static_cast<int>(o.threads));
  return run_guarded(w, [&] {
    comm::Communicator& c = *w;
    const int n = c.size(), me = c.rank();
    const bool lead = me == 0;
    const int64_t B = o.batch, din = dims.front(), dout = dims.back();
    model::MLP m(dims, B);
    m.init_weights(o.seed);
    if (n > 1) c.broadcast(Tensor::view_of(m.params(), {m.flat_size()}, DType::F32), 0);
    optim::AdamW opt(m.layout(), {o.lr, 0.9f, 0.999f, 1e-8f, 0.0f});
    std::unique_ptr<parallel::DataParallel> ddp;
    if (n > 1)
      ddp = std::make_unique<parallel::DataParallel>(c, m.layout(), m.grads(), parallel::DdpOptions{o.bucket_mb});
    const std::function<void(int)> hook = ddp ? ddp->hook() : nullptr;
    if (lead) print_test_dist_start(o, m, n, ddp.get());
    // Inputs are random per (iteration, rank); the target is the input (or, when
    // the widths differ, a random projection-free target of the output width).
    std::vector<float> x(B * din), target(B * dout);
    // The verdict: the loss on one held-out batch (iteration 0's, the same on
    // every rank), before and after training. The training batches are new
    // every iteration, so their losses differ by more than a few steps move.
    std::vector<float> held_x(B * din), held_target(B * dout);
    draw_batch(o, dims, 0, 0, held_x, held_target);
    auto held_out_loss = [&] { return m.forward(held_x.data(), din != dout ? held_target.data() : held_x.data(), B); };
    const float held_before = held_out_loss();
    Tensor loss_t = Tensor::empty({1}, DType::F32);
    TestDistSeries s;
    for (auto* v : {&s.losses, &s.dts, &s.dtfs, &s.dtbs, &s.comm_ms, &s.exposed_ms})
      v->reserve(o.iters);  // none in the loop
    for (int64_t it = 1; it <= o.iters; ++it) {
      draw_batch(o, dims, it, me, x, target);
      const float* tgt = din != dout ? target.data() : x.data();
      Timer t;
      m.zero_grad();
      Timer tf;
      float loss = m.forward(x.data(), tgt, B);
      const double dtf = tf.seconds();
      Timer tb;
      m.backward(x.data(), B, hook);
      if (ddp) ddp->finish();
      const double dtb = tb.seconds();
      opt.step(m.params(), m.grads(), o.lr);
      if (n > 1) {
        loss_t.data<float>()[0] = loss;
        c.all_reduce(loss_t, comm::ReduceOp::Avg);
        loss = loss_t.data<float>()[0];
      }
      const double dt = t.seconds();
      s.losses.push_back(loss);
      s.dts.push_back(dt * 1e3);
      s.dtfs.push_back(dtf * 1e3);
      s.dtbs.push_back(dtb * 1e3);
      if (ddp) {
        s.comm_ms.push_back(ddp->stats().comm_s * 1e3);
        s.exposed_ms.push_back(ddp->stats().exposed_s * 1e3);
      }
      if (lead && (it % o.log_interval == 0 || it == 1 || it == o.iters)) {
        std::printf("iter %lld: loss %.4f, samples/s %.0f, dt %.2fms, dtf %.2fms, dtb %.2fms\n",
                    static_cast<long long>(it), loss, static_cast<double>(B * n) / dt, dt * 1e3, dtf * 1e3, dtb * 1e3);
        std::fflush(stdout);
      }
    }
    PARALLM_CHECK(std::isfinite(s.losses.back()), NumericError, "test-dist", "loss is {} after {} iterations",
                  s.losses.back(), o.iters);
    const float held_after = held_out_loss();
    if (lead) print_test_dist_summary(o, s, n, ddp != nullptr);
    return test_dist_verdict(o, held_before, held_after, lead) ? 0 : 1;
  });
}

}  // namespace

Runner add_test_dist(CLI::App& app) {
  auto* cmd = app.add_subcommand("test-dist",
                                 "Smoke test of distributed training: an MLP trained with DDP on random data, "
                                 "with timings and terminal plots");
  auto o = std::make_shared<TestDistOptions>();
  cmd->add_option("--iters", o->iters, "Training iterations")->check(int_in(1, 1'000'000'000))->capture_default_str();
  cmd->add_option("--batch", o->batch, "Samples per rank per iteration")
      ->check(int_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--dims", o->dims, "Layer widths, input first (each in [1, 65536], at most 64)")
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "AdamW learning rate")->check(number_in(0, 100, true))->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of weights and data")->check(int_in(0, INT64_MAX))->capture_default_str();
  cmd->add_option("--log-interval", o->log_interval, "Iterations between lines")
      ->check(int_in(1, 1'000'000'000))
      ->capture_default_str();
  cmd->add_option("--bucket-mb", o->bucket_mb, "DDP gradient bucket size (MiB)")
      ->check(number_in(0, 65536, true))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads per rank (0 = OMP_NUM_THREADS or the cores per rank)")
      ->check(thread_count());
  add_world_options(cmd, o->backend, o->timeout_s, "Seconds before a communication operation is an error");
  cmd->add_flag("!--no-plot", o->plot, "Leave out the terminal plots");
  cmd->footer("On 4 ranks: parallm launch -n 4 -- parallm test-dist");
  return [o]() { return test_dist(*o); };
}

}  // namespace parallm::cli
