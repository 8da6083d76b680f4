// `parallm pipeline [--pp P] [--micro M] [--schedule gpipe|1f1b|interleaved|zb-h1] [--virtual V]
//                   [--costs F,B,W] [--unit U]`
// A pipeline schedule without training: builds every rank's list of actions
// (parallel/pipeline_schedule.h), runs them through the simulator, which
// checks them (pairs, deadlocks, passes), and prints the timeline, one row
// per rank, with each rank's idle time beside the closed-form bubble. Bad
// shapes are the ConfigErrors a training config would get (exit code 2).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/text.h"
#include "parallel/pipeline_schedule.h"

namespace parallm::cli {

namespace {
constexpr double kMaxCost = 1e6;
constexpr double kMaxColumns = 1000;  // the timeline's width at most, in columns

// "F,B,W": three finite numbers in [0, 1e6], F and B above 0.
parallel::PipeCosts parse_costs(const std::string& text) {
  std::vector<double> v;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const auto x = to_decimal(std::string_view(text).substr(at, comma - at));
    PARALLM_CHECK(x && *x >= 0 && *x <= kMaxCost, ConfigError, "cli.pipeline",
                  "--costs {}: each cost must be a number in [0, {:g}]", text, kMaxCost);
    v.push_back(*x);
    at = comma + 1;
  }
  PARALLM_CHECK(v.size() == 3 && v[0] > 0 && v[1] > 0, ConfigError, "cli.pipeline",
                "--costs {}: give F,B,W, the forward, input-gradient and weight-gradient times of one micro-batch on "
                "one rank (F and B above 0), e.g. 1,1,1",
                text);
  return {v[0], v[1], v[2]};
}

// The shortest action when no unit is given, so that each action has a column of its own.
double default_unit(const parallel::PipeShape& s, const parallel::PipeCosts& c) {
  double unit = std::min(c.f, c.b);
  if (c.w > 0) unit = std::min(unit, c.w);
  return unit / s.v;
}
}  // namespace

Runner add_pipeline(CLI::App& app) {
  auto* cmd = app.add_subcommand("pipeline", "Draw a pipeline schedule's timeline and bubble (simulated, no training)");
  struct Opts {
    int pp = 4, micro = 8, virt = 1;
    std::string schedule = "1f1b", costs = "1,1,1";
    double unit = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--pp", o->pp, "pipeline ranks (parallel.pp)")->check(int_in(1, 64))->capture_default_str();
  cmd->add_option("--micro", o->micro, "micro-batches per step (optimizer.gas)")
      ->check(int_in(1, 1024))
      ->capture_default_str();
  cmd->add_option("--schedule", o->schedule, "gpipe|1f1b|interleaved|zb-h1 (parallel.pp_schedule)")
      ->capture_default_str();
  cmd->add_option("--virtual", o->virt, "chunks per rank, interleaved only (parallel.pp_virtual)")
      ->check(int_in(1, 16))
      ->capture_default_str();
  cmd->add_option("--costs", o->costs,
                  "F,B,W: forward, input-gradient and weight-gradient time of one micro-batch on one rank (a chunk "
                  "takes 1/V of them; a fused backward B+W)")
      ->capture_default_str();
  cmd->add_option("--unit", o->unit, "time per column of the timeline (default: the shortest action)")
      ->check(number_in(0, kMaxCost, true));
  cmd->footer(
      "Examples: parallm pipeline --pp 4 --micro 8 --schedule 1f1b\n"
      "          parallm pipeline --pp 4 --micro 8 --schedule interleaved --virtual 2\n"
      "          parallm pipeline --pp 4 --micro 8 --schedule zb-h1 --costs 1,1,1");
  return [o]() {
    parallel::PipeShape s{o->pp, o->micro, o->virt, parallel::parse_pipe_kind(o->schedule)};
    parallel::check_pipe_shape(s);
    const parallel::PipeCosts costs = parse_costs(o->costs);
    const double unit = o->unit > 0 ? o->unit : default_unit(s, costs);
    const parallel::PipeSim sim = parallel::simulate(s, costs);
    PARALLM_CHECK(sim.ok, InternalError, "cli.pipeline", "the {} schedule fails its own check: {}", o->schedule,
                  sim.error);
    const double columns = std::ceil(sim.makespan / unit);
    PARALLM_CHECK(columns <= kMaxColumns, ConfigError, "cli.pipeline",
                  "the timeline would be {:g} columns wide (at most {:g}): give a larger --unit, e.g. --unit {:g}",
                  columns, kMaxColumns, std::ceil(sim.makespan / kMaxColumns));
    std::printf("parallm pipeline: %s | pp %d | %d micro-batches | %d chunk%s per rank | costs f=%g b=%g w=%g\n",
                parallel::pipe_kind_name(s.kind), s.p, s.m, s.v, s.v > 1 ? "s" : "", costs.f, costs.b, costs.w);
    std::fputs(parallel::timeline(s, sim, unit).c_str(), stdout);
    return 0;
  };
}

}  // namespace parallm::cli
