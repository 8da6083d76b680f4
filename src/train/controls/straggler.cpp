// The straggler report (straggler.h).
#include "train/controls/straggler.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace parallm::train {

StragglerReport::StragglerReport(comm::Communicator& world, double pct, int64_t window, std::vector<int> peer_group,
                                 std::vector<std::string> hosts)
    : world_(world),
      pct_(pct),
      window_(window),
      group_(std::move(peer_group)),
      hosts_(std::move(hosts)),
      mine_(Tensor::empty({1}, DType::F32)),
      all_(Tensor::empty({world.size()}, DType::F32)),
      window_ms_(static_cast<size_t>(world.size()), 0.0) {}

StragglerReport::Interval StragglerReport::gather() {
  mine_.data<float>()[0] = steps_ ? static_cast<float>(sum_s_ / static_cast<double>(steps_) * 1e3) : 0.0f;
  const bool judged = warm_;
  warm_ = true;
  if (judged) window_steps_ += steps_;
  sum_s_ = 0;
  steps_ = 0;
  world_.all_gather(mine_, all_);
  const float* ms = all_.data<float>();
  const int n = world_.size();
  Interval iv;
  for (int r = 0; r < n; ++r) {
    if (ms[r] < ms[iv.fastest]) iv.fastest = r;
    if (ms[r] > ms[iv.slowest]) iv.slowest = r;
    if (judged) window_ms_[static_cast<size_t>(r)] += ms[r];
  }
  iv.min_ms = ms[iv.fastest];
  iv.max_ms = ms[iv.slowest];
  if (judged && ++intervals_ == window_) judge(iv);
  return iv;
}

// The end of a window: each rank's mean against its peers' low median.
void StragglerReport::judge(Interval& iv) {
  const auto k = static_cast<double>(intervals_);
  std::map<int, std::vector<double>> peers;  // group -> its ranks' window means
  for (size_t r = 0; r < window_ms_.size(); ++r) peers[group_[r]].push_back(window_ms_[r] / k);
  for (auto& [g, v] : peers) std::sort(v.begin(), v.end());
  for (size_t r = 0; r < window_ms_.size() && pct_ > 0; ++r) {
    const std::vector<double>& v = peers[group_[r]];
    const double median = v[(v.size() - 1) / 2], mean = window_ms_[r] / k;
    if (v.size() < 2 || median <= 0 || mean <= median * (1 + pct_ / 100)) continue;
    iv.stragglers.push_back(static_cast<int>(r));
    iv.warning += fmt::format(
        "{}straggler: rank {} (host {}) computed {:.1f} ms per step over the last {} log intervals ({} steps), "
        "{:.0f}% more than the median of its {} peer ranks ({:.1f} ms; train.straggler_pct={:g}): look at that "
        "host (a slower or throttled device, another job on its cores, a failing part)",
        iv.warning.empty() ? "" : "\n", r, r < hosts_.size() ? hosts_[r] : "?", mean, intervals_, window_steps_,
        (mean / median - 1) * 100, v.size(), median, pct_);
  }
  std::fill(window_ms_.begin(), window_ms_.end(), 0.0);
  intervals_ = 0;
  window_steps_ = 0;
}

}  // namespace parallm::train
