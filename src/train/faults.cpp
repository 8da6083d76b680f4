#include "train/faults.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "core/env.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/log.h"
#include "core/text.h"
#include "core/timer.h"

namespace parallm::train {

namespace {

constexpr float kSpike = 100;  // PARALLM_FAULT_SPIKE's factor

std::vector<int64_t> iters_of(env::Var var, const char* name) {
  const char* list = env::get(var);
  return list ? parse_int_list(list, "train", name) : std::vector<int64_t>{};
}

bool at(const std::vector<int64_t>& iters, int64_t it) {
  return std::find(iters.begin(), iters.end(), it) != iters.end();
}

ScaleFault scale_setting() {
  const char* text = env::get(env::Var::FaultScale);
  if (!text) return {};
  const std::string t = text;
  const size_t b = t.rfind(':'), a = b == std::string::npos || b == 0 ? std::string::npos : t.rfind(':', b - 1);
  const std::optional<double> factor =
      a == std::string::npos || a == 0 ? std::nullopt : to_decimal(t.substr(a + 1, b - a - 1));
  const std::optional<int64_t> from = factor ? to_int(t.substr(b + 1)) : std::nullopt;
  PARALLM_CHECK(factor && std::isfinite(static_cast<float>(*factor)) && from && *from >= 0, ConfigError, "env",
                "PARALLM_FAULT_SCALE={}: expected NAME:FACTOR:I (a parameter, a finite factor, an iteration >= 0), "
                "e.g. h.1.mlp.c_fc.weight:1e5:3",
                t);
  ScaleFault f;
  f.param = t.substr(0, a);
  if (f.param.rfind("transformer.", 0) != 0) f.param = "transformer." + f.param;
  f.factor = static_cast<float>(*factor);
  f.from = *from;
  return f;
}

double slow_seconds(int rank) {
  const char* v = env::get(env::Var::FaultSlowRank);
  if (!v) return 0;
  const std::string s = v;
  const size_t colon = s.find(':');
  const auto r = to_int(s.substr(0, colon));
  const auto ms = to_int(colon == std::string::npos ? std::string() : s.substr(colon + 1));
  PARALLM_CHECK(r && ms && *r >= 0 && *ms >= 0 && *ms <= 3600000, ConfigError, "env",
                "PARALLM_FAULT_SLOW_RANK=\"{}\": expected R:MS, a world rank and milliseconds in [0, 3600000]", s);
  return *r == rank ? static_cast<double>(*ms) / 1e3 : 0.0;
}

parallel::MidStepFault stop_setting(int world_rank) {
  const char* v = env::get(env::Var::FaultStopRank);
  if (!v || !*v) return {};
  const std::string text = v;
  const size_t a = text.find(':'), b = text.rfind(':');
  PARALLM_CHECK(a != std::string::npos && b > a, ConfigError, "env",
                "PARALLM_FAULT_STOP_RANK={}: expected R:I:kill|stop", text);
  const auto nums =
      parse_int_list(text.substr(0, a) + "," + text.substr(a + 1, b - a - 1), "env", "PARALLM_FAULT_STOP_RANK");
  const std::string s = text.substr(b + 1);
  PARALLM_CHECK(s == "kill" || s == "stop", ConfigError, "env",
                "PARALLM_FAULT_STOP_RANK={}: the signal is kill or stop", text);
  if (nums[0] != world_rank) return {};
  return {nums[1], s == "kill" ? SIGKILL : SIGSTOP};
}

void write_inf(float* p, Device dev) {
  const float inf = std::numeric_limits<float>::infinity();
  if (dev.is_cpu())
    *p = inf;
  else
    gpu::memcpy_h2d(p, &inf, sizeof(float));
}

// Multiplies n floats at p (on dev) by f, through the host on a GPU (a test hook).
void scale_floats(float* p, int64_t n, Device dev, float f) {
  if (dev.is_cpu()) {
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
    return;
  }
  std::vector<float> host(static_cast<size_t>(n));
  gpu::memcpy_d2h(host.data(), p, host.size() * sizeof(float));
  for (float& v : host) v *= f;
  gpu::memcpy_h2d(p, host.data(), host.size() * sizeof(float));
}

}  // namespace

Faults Faults::from_env(int world_rank) {
  Faults f;
  f.inf_iters = iters_of(env::Var::FaultInfGrad, "PARALLM_FAULT_INF_GRAD");
  f.spike_iters = iters_of(env::Var::FaultSpike, "PARALLM_FAULT_SPIKE");
  f.scale = scale_setting();
  f.slow_s = slow_seconds(world_rank);
  f.stop = stop_setting(world_rank);
  f.leak_kb = env::integer(env::Var::FaultLeak, 0, int64_t{1} << 30);
  return f;
}

void Faults::check(const RunConfig& cfg) const {
  if (stop.signal != 0 && cfg.parallel.pp == 1)
    log::warn("PARALLM_FAULT_STOP_RANK is set, but only a pipeline (parallel.pp > 1) stops mid-step: ignored");
  if (scale.from < 0) return;
  try {
    model::ParamLayout(cfg.model).find(scale.param);
  } catch (const ConfigError& e) {
    throw ConfigError("env", fmt::format("PARALLM_FAULT_SCALE: {}", e.message()));
  }
  PARALLM_CHECK(cfg.parallel.zero.stage == 0, ConfigError, "env",
                "PARALLM_FAULT_SCALE with zero.stage={}: it scales the model's own parameters (zero.stage=0)",
                cfg.parallel.zero.stage);
}

double Faults::before_passes(model::GPT& m, int64_t it) const {
  // The scale fault wherever this rank holds its parameter (every tensor-parallel part; both pipeline ends' copies).
  if (scale.from >= 0 && it >= scale.from) {
    for (const auto& slot : m.layout().slots())
      if (slot.name == scale.param) scale_floats(m.params() + slot.offset, slot.numel, m.device(), scale.factor);
    m.params_changed();
  }
  if (slow_s <= 0) return 0;
  Timer ts;  // a slower device, as a sleep before the passes
  std::this_thread::sleep_for(std::chrono::duration<double>(slow_s));
  return ts.seconds();
}

void Faults::after_sync(parallel::GradSync& sync, const model::ParamLayout& layout, int64_t it) const {
  const bool inf = at(inf_iters, it), spike = at(spike_iters, it);
  if (!inf && !spike) return;
  const parallel::UpdateTarget u = sync.update();
  if (inf && u.state_size > 0) {
    // Not into a pipeline's tied copy of the token table (the norm leaves it out).
    int64_t first = 0;
    if (!u.runs)
      for (const auto& slot : layout.slots())
        if (!slot.tied_copy) {
          first = slot.offset;
          break;
        }
    write_inf(u.grads + first, u.device);
  }
  if (!spike) return;
  if (u.runs) {
    for (const auto& r : *u.runs)
      if (r.length > 0) scale_floats(u.grads + r.grad, r.length, u.device, kSpike);
  } else if (u.state_size > 0) {
    scale_floats(u.grads, u.state_size, u.device, kSpike);
  }
}

float Faults::loss(float mean, int64_t it) const {
  return at(spike_iters, it) ? mean * kSpike : mean;
}

void Faults::leak() const {
  if (leak_kb <= 0) return;
  static std::vector<std::unique_ptr<char[]>> kept;
  const size_t n = static_cast<size_t>(leak_kb) << 10;
  kept.push_back(std::make_unique<char[]>(n));
  std::memset(kept.back().get(), 1, n);  // touched: resident
}

}  // namespace parallm::train
