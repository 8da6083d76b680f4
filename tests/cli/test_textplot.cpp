// Terminal plots: the extremes are labelled and drawn on the top and bottom
// rows, long series are binned to the width, degenerate input still plots.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "cli/textplot.h"

using parallm::cli::PlotOptions;
using parallm::cli::text_plot;

namespace {
std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}
}  // namespace

TEST(TextPlot, FallingSeriesStartsTopLeftAndEndsBottomRight) {
  std::vector<double> y;
  for (int i = 0; i < 100; ++i) y.push_back(3.0 - 0.02 * i);
  PlotOptions o;
  o.width = 20;
  o.height = 5;
  o.x0 = 1;
  auto l = lines(text_plot(y, "loss", o));
  ASSERT_EQ(l.size(), 1u + 5 + 2);
  EXPECT_EQ(l[0], "loss");
  EXPECT_NE(l[1].find("3 |"), std::string::npos);  // top label: the maximum
  EXPECT_EQ(l[1].find('|') + 1, l[1].find('*'));   // first column, top row
  EXPECT_EQ(l[5].back(), '*');                     // last column, bottom row
  EXPECT_NE(l[7].find("100"), std::string::npos);  // x range
}

TEST(TextPlot, ConstantEmptyAndNonFinite) {
  EXPECT_NE(text_plot({}, "t").find("(no data)"), std::string::npos);
  EXPECT_NE(text_plot({NAN}, "t").find("(no data)"), std::string::npos);
  const std::string flat = text_plot({2.0, 2.0, 2.0}, "flat");
  EXPECT_NE(flat.find("***"), std::string::npos);
  const std::string gap = text_plot({1.0, NAN, 3.0}, "gap");
  EXPECT_NE(gap.find('*'), std::string::npos);
}
