// Subcommands of the parallm program. Each registers itself on the CLI11 app
// and returns a runner; main() decides exit codes.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "train/config/config.h"

namespace parallm::cli {

using Runner = std::function<int()>;
Runner add_train(CLI::App& app);
Runner add_prepare(CLI::App& app);
Runner add_sample(CLI::App& app);
Runner add_launch(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_doctor(CLI::App& app);
Runner add_test_dist(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_pipeline(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_report(CLI::App& app);

// The program's command line as given (argv, the program first), kept by
// main() before parsing: train records it in the run's repro.json.
void keep_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

// `[config.yaml] key=value ...` as train takes them; errors name `where`.
train::RunConfig run_config_from_args(const std::vector<std::string>& args, const char* where);

}  // namespace parallm::cli
