// Subcommands of the parallm program. Each registers itself on the CLI11 app
// and returns a runner; main() decides exit codes.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace parallm::cli {

using Runner = std::function<int()>;
Runner add_train(CLI::App& app);
Runner add_prepare(CLI::App& app);
Runner add_sample(CLI::App& app);
Runner add_launch(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_doctor(CLI::App& app);
Runner add_test_dist(CLI::App& app);

}  // namespace parallm::cli
