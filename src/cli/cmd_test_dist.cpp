// `parallm test-dist`: the smoke test of distributed training. Every rank
// builds the same MLP (128-1024-512-256-128-128 by default), rank 0's
// weights are broadcast, each rank draws its own random batches, and DDP
// averages the gradients with bucketed all-reduces overlapped with backward;
// AdamW updates. Rank 0 prints iter, loss (mean over ranks), samples/s
// (global), dt, dtf, dtb, and at the end a summary and terminal plots of the
// loss and the step time. The loss must fall, so a broken reduction shows.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/textplot.h"
#include "cli/world.h"
#include "core/error.h"
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

std::vector<int64_t> parse_dims(const std::string& s) {
  const std::vector<int64_t> dims = parse_int_list(s, "test-dist", "--dims");
  for (int64_t d : dims) PARALLM_CHECK(d > 0, ConfigError, "test-dist", "--dims: \"{}\" is not a positive width", d);
  PARALLM_CHECK(dims.size() >= 2, ConfigError, "test-dist",
                "--dims needs at least an input and an output width (e.g. 128,1024,128), got \"{}\"", s);
  return dims;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int test_dist(const TestDistOptions& o) {
  PARALLM_CHECK(o.iters > 0 && o.batch > 0 && o.log_interval > 0, ConfigError, "test-dist",
                "--iters, --batch and --log-interval must be positive");
  const std::vector<int64_t> dims = parse_dims(o.dims);
  if (o.threads > 0) set_num_threads(static_cast<int>(o.threads));
  comm::CommOptions copt;
  copt.timeout_s = o.timeout_s;
  World w = start_world(o.backend, copt);
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
    if (lead) {
      std::printf(
          "test-dist: MLP %s (%.2fM parameters), %d rank%s x batch %lld (global %lld), %lld iterations, %d "
          "thread%s per rank%s\n",
          o.dims.c_str(), static_cast<double>(m.num_params()) / 1e6, n, n == 1 ? "" : "s", static_cast<long long>(B),
          static_cast<long long>(B * n), static_cast<long long>(o.iters), num_threads(), num_threads() == 1 ? "" : "s",
          ddp ? fmt::format(", {} gradient bucket{}", ddp->num_buckets(), ddp->num_buckets() == 1 ? "" : "s").c_str()
              : "");
      std::fflush(stdout);
    }
    // Inputs are random per (iteration, rank); the target is the input (or, when
    // the widths differ, a random projection-free target of the output width).
    std::vector<float> x(B * din), target(B * dout);
    Tensor loss_t = Tensor::empty({1}, DType::F32);
    std::vector<double> losses, dts, dtfs, dtbs, comm_ms, exposed_ms;
    for (auto* v : {&losses, &dts, &dtfs, &dtbs, &comm_ms, &exposed_ms}) v->reserve(o.iters);  // none in the loop
    for (int64_t it = 1; it <= o.iters; ++it) {
      fill_normal(x.data(), B * din, 0.0f, 1.0f, o.seed, stream_id(kRngData, static_cast<uint64_t>(it), me));
      const float* tgt = x.data();
      if (din != dout) {
        fill_normal(target.data(), B * dout, 0.0f, 1.0f, o.seed, stream_id(kRngData, static_cast<uint64_t>(it), me, 1));
        tgt = target.data();
      }
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
      losses.push_back(loss);
      dts.push_back(dt * 1e3);
      dtfs.push_back(dtf * 1e3);
      dtbs.push_back(dtb * 1e3);
      if (ddp) {
        comm_ms.push_back(ddp->stats().comm_s * 1e3);
        exposed_ms.push_back(ddp->stats().exposed_s * 1e3);
      }
      if (lead && (it % o.log_interval == 0 || it == 1 || it == o.iters)) {
        std::printf("iter %lld: loss %.4f, samples/s %.0f, dt %.2fms, dtf %.2fms, dtb %.2fms\n",
                    static_cast<long long>(it), loss, static_cast<double>(B * n) / dt, dt * 1e3, dtf * 1e3, dtb * 1e3);
        std::fflush(stdout);
      }
    }
    PARALLM_CHECK(std::isfinite(losses.back()), NumericError, "test-dist", "loss is {} after {} iterations",
                  losses.back(), o.iters);
    if (lead) {
      // Steady state: the first iterations (allocation, thread start-up) left out of the medians.
      const size_t skip = std::min<size_t>(dts.size() - 1, 2);
      auto tail = [&](const std::vector<double>& v) { return std::vector<double>(v.begin() + skip, v.end()); };
      const double dt_med = median(tail(dts));
      std::string comm;
      if (ddp) {
        const double cm = median(tail(comm_ms)), ex = median(tail(exposed_ms));
        comm = fmt::format(", all-reduce {:.2f}ms/iter ({:.0f}% not overlapped)", cm,
                           cm > 0 ? 100.0 * std::min(1.0, ex / cm) : 0.0);
      }
      std::printf(
          "test-dist: loss %.4f -> %.4f; median dt %.2fms (dtf %.2fms, dtb %.2fms), %.0f samples/s over %d "
          "rank%s%s\n",
          losses.front(), losses.back(), dt_med, median(tail(dtfs)), median(tail(dtbs)),
          static_cast<double>(B * n) / (dt_med / 1e3), n, n == 1 ? "" : "s", comm.c_str());
      if (o.plot) {
        PlotOptions po;
        po.x0 = 1;
        std::fputs(text_plot(losses, "loss vs iter", po).c_str(), stdout);
        po.x0 = static_cast<int>(skip) + 1;
        std::fputs(text_plot(tail(dts), fmt::format("dt (ms) vs iter (after {} warm-up iterations)", skip), po).c_str(),
                   stdout);
      }
      std::fflush(stdout);
    }
    const bool fell = losses.back() < losses.front();
    if (!fell && lead) std::fprintf(stderr, "test-dist: the loss did not fall: training is broken\n");
    return fell ? 0 : 1;
  });
}

}  // namespace

Runner add_test_dist(CLI::App& app) {
  auto* cmd = app.add_subcommand("test-dist",
                                 "Smoke test of distributed training: an MLP trained with DDP on random data, "
                                 "with timings and terminal plots");
  auto o = std::make_shared<TestDistOptions>();
  cmd->add_option("--iters", o->iters, "Training iterations")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Samples per rank per iteration")->capture_default_str();
  cmd->add_option("--dims", o->dims, "Layer widths, input first")->capture_default_str();
  cmd->add_option("--lr", o->lr, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of weights and data")->capture_default_str();
  cmd->add_option("--log-interval", o->log_interval, "Iterations between lines")->capture_default_str();
  cmd->add_option("--bucket-mb", o->bucket_mb, "DDP gradient bucket size (MiB)")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads per rank (0 = OMP_NUM_THREADS or all cores)");
  add_world_options(cmd, o->backend, o->timeout_s, "Seconds before a communication operation is an error");
  cmd->add_flag("!--no-plot", o->plot, "Leave out the terminal plots");
  cmd->footer("On 4 ranks: parallm launch -n 4 -- parallm test-dist");
  return [o]() { return test_dist(*o); };
}

}  // namespace parallm::cli
