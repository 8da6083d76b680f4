// Plots for a terminal or a log file: a series drawn with ASCII characters
// on a fixed grid, y range labelled on the left, x range below. Used by
// `parallm test-dist` to show loss and step time without a plotting library.
#pragma once
#include <string>
#include <vector>

namespace parallm::cli {

struct PlotOptions {
  int width = 64;   // plot columns (the series is binned to fit: mean per column)
  int height = 12;  // plot rows
  int x0 = 0;       // x value of the first point
};

// Title line, the grid with y labels, the x axis: a block ending in a newline.
// An empty series gives the title and "(no data)".
std::string text_plot(const std::vector<double>& y, const std::string& title, const PlotOptions& opt = {});

}  // namespace parallm::cli
