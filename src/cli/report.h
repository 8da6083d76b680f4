// `parallm report`: one self-contained HTML file (inline CSS and SVG, no
// script, nothing fetched) showing one or more run directories side by side:
// a table of the runs (model, steps, best and last val loss, tokens/s) and
// plots with the runs overlaid: train and val loss against steps and against
// tokens, learning rate, tokens/s, MFU, gradient norm, the slowest and
// fastest rank's step time where the run recorded them, and the peak memory
// by category.
//
// Each line plot is an <svg class="plot"> whose data-domain ("x0 x1 y0 y1")
// and data-box ("left top width height") give the mapping from data to
// pixels, and each series a <polyline> with data-run and data-metric, every
// metrics record one point (at most kMaxPoints a series: longer ones keep
// every k-th record, and say so), so a reader can map the drawing back to
// metrics.jsonl (tests/cli/report_check.py does).
#pragma once
#include <string>
#include <vector>

namespace parallm::cli {

inline constexpr size_t kMaxPoints = 4000;

// The report of `runs` (run directories: metrics.jsonl, and config.json and
// memory.json where present). IoError naming a directory without metrics, or
// a line that is not a metrics record; a last line without its newline that
// does not parse (a run still writing it) is skipped with a warning.
std::string run_report_html(const std::vector<std::string>& runs);

}  // namespace parallm::cli
