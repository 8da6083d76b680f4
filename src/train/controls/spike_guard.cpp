#include "train/controls/spike_guard.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace parallm::train {

nlohmann::json SpikeGuardState::to_json() const {
  return {{"loss", loss}, {"grad_norm", grad}, {"consecutive", consecutive}, {"skipped", skipped}};
}

SpikeGuardState SpikeGuardState::from_json(const nlohmann::json& j) {
  const auto bad = [](const std::string& what) {
    return IoError("checkpoint.load", fmt::format("state.json's spike_guard entry is malformed: {}", what));
  };
  if (!j.is_object()) throw bad("not an object");
  SpikeGuardState s;
  for (const char* k : {"loss", "grad_norm"}) {
    if (!j.contains(k) || !j[k].is_array()) throw bad(fmt::format("\"{}\" is not a list", k));
    for (const auto& v : j[k]) {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        throw bad(fmt::format("\"{}\" holds {}, not a finite number", k, v.dump()));
      (k[0] == 'l' ? s.loss : s.grad).push_back(v.get<double>());
    }
  }
  if (s.loss.size() != s.grad.size())
    throw bad(fmt::format("\"loss\" holds {} values, \"grad_norm\" {}", s.loss.size(), s.grad.size()));
  for (const char* k : {"consecutive", "skipped"}) {
    if (!j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 0)
      throw bad(fmt::format("\"{}\" is not a count", k));
  }
  s.consecutive = j["consecutive"].get<int64_t>();
  s.skipped = j["skipped"].get<int64_t>();
  return s;
}

bool SpikeGuardState::operator==(const SpikeGuardState& o) const {
  return loss == o.loss && grad == o.grad && consecutive == o.consecutive && skipped == o.skipped;
}

double zscore(const std::vector<double>& w, double x) {
  if (w.empty()) return 0;
  double sum = 0;
  for (double v : w) sum += v;
  const double mean = sum / static_cast<double>(w.size());
  double sq = 0;
  for (double v : w) sq += (v - mean) * (v - mean);
  const double sd = std::sqrt(sq / static_cast<double>(w.size()));
  if (sd > 0) return (x - mean) / sd;
  return x > mean ? std::numeric_limits<double>::infinity() : 0.0;
}

SpikeGuard::SpikeGuard(const SpikeGuardConfig& cfg, SpikeGuardState st) : cfg_(cfg), st_(std::move(st)) {
  const auto excess = static_cast<int64_t>(st_.loss.size()) - cfg_.window;
  if (excess > 0) {  // a resume with a shorter train.skip_window keeps the newest values
    st_.loss.erase(st_.loss.begin(), st_.loss.begin() + excess);
    st_.grad.erase(st_.grad.begin(), st_.grad.begin() + excess);
  }
}

std::string SpikeGuard::reason(double loss, double norm) const {
  if (!warm()) return "";
  std::string why;
  const auto check = [&](double z_max, const std::vector<double>& w, double x, const char* what) {
    if (z_max <= 0) return;
    const double z = zscore(w, x);
    if (z > z_max) why += fmt::format("{}{} z-score {:.3g} > {:g}", why.empty() ? "" : ", ", what, z, z_max);
  };
  check(cfg_.loss_z, st_.loss, loss, "loss");
  check(cfg_.grad_z, st_.grad, norm, "grad norm");
  return why;
}

void SpikeGuard::push(double loss, double norm) {
  st_.loss.push_back(loss);
  st_.grad.push_back(norm);
  if (static_cast<int64_t>(st_.loss.size()) > cfg_.window) {
    st_.loss.erase(st_.loss.begin());
    st_.grad.erase(st_.grad.begin());
  }
}

std::string SpikeGuard::judge(int64_t it, double loss, double norm) {
  std::string why = reason(loss, norm);
  if (why.empty()) {
    push(loss, norm);
    st_.consecutive = 0;
    return why;
  }
  ++st_.skipped;
  if (++st_.consecutive > cfg_.max_consecutive)
    throw NumericError(
        "train",
        fmt::format("iter {}: {} steps in a row skipped by the loss-spike guard ({}), more than "
                    "train.skip_max_consecutive={} (train.skip_loss_zscore={:g}, train.skip_grad_zscore={:g}, "
                    "train.skip_window={}): a spike the guard cannot ride out. The weights are those before the "
                    "first skipped step; roll back to an earlier checkpoint past this data, lower "
                    "optimizer.learning_rate, or raise train.skip_max_consecutive",
                    it, st_.consecutive, why, cfg_.max_consecutive, cfg_.loss_z, cfg_.grad_z, cfg_.window));
  return why;
}

}  // namespace parallm::train
