// `parallm report RUN_DIR [RUN_DIR...] [--out FILE]`: the runs' metrics as one
// self-contained HTML file with SVG plots, several runs overlaid (cli/report.h).
#include <filesystem>

#include "cli/commands.h"
#include "cli/report.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/log.h"

namespace parallm::cli {

Runner add_report(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Plot runs' metrics into one HTML file (SVG, readable offline)");
  struct Opts {
    std::vector<std::string> runs;
    std::string out = "report.html";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("runs", o->runs, "run directories (train.out_dir), overlaid in one report")->required();
  cmd->add_option("--out", o->out, "the HTML file to write")->capture_default_str();
  return [o]() {
    std::error_code ec;
    PARALLM_CHECK(!std::filesystem::is_directory(o->out, ec), ConfigError, "cli.report",
                  "--out {}: is a directory; give the HTML file to write, e.g. --out {}", o->out,
                  (std::filesystem::path(o->out) / "report.html").string());
    const std::string html = run_report_html(o->runs);
    write_file_atomic(o->out, {{html.data(), html.size()}});
    log::info("wrote {} ({} run{}, {} KB)", o->out, o->runs.size(), o->runs.size() == 1 ? "" : "s", html.size() / 1024);
    return 0;
  };
}

}  // namespace parallm::cli
