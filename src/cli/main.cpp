// parallm: the program. Parses the subcommand, runs it, and is the only place
// that turns errors into exit codes: 2 for bad input (config, arguments), 1
// for everything else. Messages name the operation and what was wrong.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/matmul.h"

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// `parallm trian`: a first word that is no subcommand is named, with the
// valid ones (and the closest), instead of CLI11's "A subcommand is required".
bool is_unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  const std::string word = argv[1];
  std::string names, closest;
  size_t best = 3;  // suggest within two edits
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == word) return false;
    names += (names.empty() ? "" : ", ") + sub->get_name();
    const size_t d = edit_distance(word, sub->get_name());
    if (d < best) best = d, closest = sub->get_name();
  }
  std::fprintf(stderr, "error: [cli] unknown subcommand \"%s\"%s; the subcommands are %s (parallm --help)\n",
               word.c_str(), closest.empty() ? "" : (" (did you mean " + closest + "?)").c_str(), names.c_str());
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  parallm::log::init_console();
  parallm::cli::keep_command_line(argc, argv);
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
  auto pipeline = parallm::cli::add_pipeline(app);
  auto export_ = parallm::cli::add_export(app);
  auto report = parallm::cli::add_report(app);
  if (is_unknown_subcommand(app, argc, argv)) return 2;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Bad input, like a bad config key: a sentence naming the option, exit code 2.
    std::fprintf(stderr, "error: [cli] %s (--help lists the options and their ranges)\n", e.what());
    return 2;
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
    if (app.got_subcommand("pipeline")) return pipeline();
    if (app.got_subcommand("export")) return export_();
    if (app.got_subcommand("report")) return report();
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
