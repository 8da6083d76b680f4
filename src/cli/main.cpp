// parallm: the program. Parses the subcommand, runs it, and is the only place
// that turns errors into exit codes: 2 for bad input (config, arguments), 1
// for everything else. Messages name the operation and what was wrong.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <new>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/matmul.h"

int main(int argc, char** argv) {
  parallm::log::init_console();
  CLI::App app{"parallm: train GPT models in parallel, from one CPU core to many GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "parallm 0.1.0");
  auto train = parallm::cli::add_train(app);
  auto prepare = parallm::cli::add_prepare(app);
  auto sample = parallm::cli::add_sample(app);
  auto launch = parallm::cli::add_launch(app);
  auto bench = parallm::cli::add_bench(app);
  auto doctor = parallm::cli::add_doctor(app);
  auto test_dist = parallm::cli::add_test_dist(app);
  auto plan = parallm::cli::add_plan(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    // The kernels' ISA cap (PARALLM_ISA) is read once; read it here, before
    // any parallel region, so a bad value is reported like any bad input.
    parallm::kernels::cpu_kernel_isa();
    if (app.got_subcommand("train")) return train();
    if (app.got_subcommand("prepare")) return prepare();
    if (app.got_subcommand("sample")) return sample();
    if (app.got_subcommand("launch")) return launch();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("doctor")) return doctor();
    if (app.got_subcommand("test-dist")) return test_dist();
    if (app.got_subcommand("plan")) return plan();
  } catch (const parallm::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const parallm::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: [memory] out of host memory: the configuration needs more than this machine has\n");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "error: [io] %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: [internal] %s\n", e.what());
    return 1;
  }
  return 0;
}
