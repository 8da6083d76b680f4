// `parallm train [config.yaml] [key=value ...]`
#include <cstdio>

#include "cli/commands.h"
#include "cli/world.h"
#include "comm/communicator.h"
#include "core/env.h"
#include "core/error.h"
#include "core/stop_signal.h"
#include "train/config/config.h"
#include "train/loop/trainer.h"

namespace parallm::cli {

namespace {
std::vector<std::string>& kept_command_line() {
  static std::vector<std::string> argv;
  return argv;
}
}  // namespace

void keep_command_line(int argc, char** argv) {
  kept_command_line().assign(argv, argv + argc);
}

const std::vector<std::string>& command_line() {
  return kept_command_line();
}

train::RunConfig run_config_from_args(const std::vector<std::string>& args, const char* where) {
  train::RunConfig cfg;
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.find('=') == std::string::npos) {
      PARALLM_CHECK(i == 0, ConfigError, where,
                    "\"{}\" is not key=value (only the first argument may be a config file)", a);
      cfg.load_file(a);
    } else {
      overrides.push_back(a);
    }
  }
  cfg.apply_overrides(overrides);
  return cfg;
}

Runner add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a GPT (config file and/or key=value overrides)");
  auto args = std::make_shared<std::vector<std::string>>();
  auto help_keys = std::make_shared<bool>(false);
  auto help_env = std::make_shared<bool>(false);
  cmd->add_option("args", *args, "[config.yaml] key=value ...");
  cmd->add_flag("--help-keys", *help_keys, "List every config key with its type and default");
  cmd->add_flag("--help-env", *help_env, "List the environment variables parallm reads, with defaults and meaning");
  cmd->footer("Example: parallm train model.n_layer=4 model.n_embd=128 train.max_iters=2000");
  return [args, help_keys, help_env]() {
    if (*help_keys) {
      for (const auto& [k, d] : train::RunConfig::describe()) std::printf("  %-32s %s\n", k.c_str(), d.c_str());
      return 0;
    }
    if (*help_env) {
      std::fputs(env::help_table().c_str(), stdout);
      return 0;
    }
    // SIGUSR1/SIGTERM ask the run to save and stop (core/stop_signal.h): from
    // the start, and again once MPI (which may set its own handlers) is up.
    stop_signal::install();
    train::RunConfig cfg = run_config_from_args(*args, "cli.train");
    comm::CommOptions copt;
    copt.timeout_s = cfg.comm.timeout_s;
    World world = start_world(comm::resolve_backend(cfg.comm.backend, !cfg.train.device.is_cpu()), copt,
                              /*announce=*/false);
    stop_signal::install();
    train::RunSummary s;
    run_guarded(world, [&] {
      announce_mesh(world, cfg.mesh_dims(), cfg.parallel.tp_across_nodes, !cfg.train.device.is_cpu());
      train::Invocation inv{command_line(), {}};
      for (const comm::RankPlace& r : world.topo.ranks) inv.hosts.push_back(r.host);
      s = train::run_training(cfg, world.comm.get(), ranks_per_node(world.topo), inv);
      return 0;
    });
    if (!s.nothing_to_do.empty()) {
      if (world->rank() == 0) std::printf("%s\n", s.nothing_to_do.c_str());
      return 0;
    }
    if (world->rank() == 0 && s.evaluated_only)
      std::printf("evaluated the state before iteration %lld (train.eval_only): val loss %.4f\n",
                  static_cast<long long>(s.first_iter), s.last_val_loss);
    else if (world->rank() == 0)
      std::printf("done: iters %lld..%lld, last val loss %.4f, best val loss %.4f\n",
                  static_cast<long long>(s.first_iter), static_cast<long long>(s.last_iter), s.last_val_loss,
                  s.best_val_loss);
    if (!s.stopped.empty()) {  // every rank says where it stopped: the same iteration everywhere
      if (world->rank() == 0) std::printf("%s\n", s.stopped.c_str());
      std::printf("parallm: rank %d stopped after iteration %lld\n", world->rank(),
                  static_cast<long long>(s.last_iter));
    }
    return 0;
  };
}

}  // namespace parallm::cli
