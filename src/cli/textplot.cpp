#include "cli/textplot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace parallm::cli {

std::string text_plot(const std::vector<double>& y, const std::string& title, const PlotOptions& opt) {
  std::string out = title + "\n";
  std::vector<double> v;
  for (double d : y)
    if (std::isfinite(d)) v.push_back(d);
  if (v.empty()) return out + "  (no data)\n";
  const int n = static_cast<int>(y.size());
  const int w = std::max(1, std::min(opt.width, n));
  const int h = std::max(2, opt.height);
  // Column c shows the mean of its bin of points (non-finite points skipped).
  std::vector<double> col(w, NAN);
  for (int c = 0; c < w; ++c) {
    const int b = static_cast<int>(static_cast<long>(c) * n / w),
              e = static_cast<int>(static_cast<long>(c + 1) * n / w);
    double s = 0;
    int k = 0;
    for (int i = b; i < e; ++i)
      if (std::isfinite(y[i])) s += y[i], ++k;
    if (k) col[c] = s / k;
  }
  double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    lo -= 0.5;
    hi += 0.5;
  }
  std::vector<std::string> grid(h, std::string(w, ' '));
  for (int c = 0; c < w; ++c) {
    if (!std::isfinite(col[c])) continue;
    const int r = static_cast<int>(std::lround((hi - col[c]) / (hi - lo) * (h - 1)));
    grid[std::clamp(r, 0, h - 1)][c] = '*';
  }
  const std::string top = fmt::format("{:.4g}", hi), mid = fmt::format("{:.4g}", (hi + lo) / 2),
                    bot = fmt::format("{:.4g}", lo);
  const size_t lw = std::max({top.size(), mid.size(), bot.size()});
  for (int r = 0; r < h; ++r) {
    const std::string& label = r == 0 ? top : r == h - 1 ? bot : r == (h - 1) / 2 ? mid : std::string();
    out += fmt::format("{:>{}} |{}\n", label, lw, grid[r]);
  }
  out += fmt::format("{:>{}} +{}\n", "", lw, std::string(w, '-'));
  const std::string first = std::to_string(opt.x0), last = std::to_string(opt.x0 + n - 1);
  const int gap = std::max(1, w - static_cast<int>(first.size() + last.size()));
  out += fmt::format("{:>{}}  {}{}{}\n", "", lw, first, std::string(gap, ' '), last);
  return out;
}

}  // namespace parallm::cli
