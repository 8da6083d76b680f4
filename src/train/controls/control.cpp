#include "train/controls/control.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/host.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "core/text.h"
#include "train/controls/job_limit.h"

namespace parallm::train {

namespace {

namespace fs = std::filesystem;

enum Flag { kKill, kSave, kSignal, kDuration, kRecords, kFlags };
constexpr int kRankBits = 20;  // the signal flag: signal number << kRankBits | rank (MAX names one rank that got it)

bool file_exists(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::exists(path, ec);
}

// Every rank's values, MAX.
void max_over(comm::Communicator& world, int32_t* v, int n) {
  if (world.size() == 1) return;
  Tensor t = Tensor::empty({n}, DType::I32);
  std::copy(v, v + n, t.data<int32_t>());
  world.all_reduce(t, comm::ReduceOp::Max);
  std::copy(t.data<int32_t>(), t.data<int32_t>() + n, v);
}

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// train.max_duration in seconds from now (0: none): rank 0 asks the
// scheduler for auto, and every rank gets its answer or its error.
double limit_from_now(const TrainSection& t, comm::Communicator& world) {
  if (t.max_duration_s == 0) return 0;
  if (t.max_duration_s != kDurationAuto) return std::max(t.max_duration_s - process_age_s(), 1e-3);
  float left = -1;
  std::string error;
  if (world.rank() == 0) {
    try {
      left = static_cast<float>(job_time_left_s(comm::process_env(), run_command(), epoch_now()));
    } catch (const ConfigError& e) {
      error = e.message();
    }
  }
  if (world.size() > 1) {
    Tensor v = Tensor::empty({1}, DType::F32);
    v.data<float>()[0] = left;
    world.broadcast(v, 0);
    left = v.data<float>()[0];
  }
  if (left < 0)
    throw ConfigError("config", error.empty() ? "train.max_duration=auto: rank 0 could not read the job's end time "
                                                "(its error says why)"
                                              : error);
  return std::max(static_cast<double>(left), 1e-3);
}

}  // namespace

RunControl::RunControl(const RunConfig& cfg, comm::Communicator& world) : t_(cfg.train), world_(world) {
  limit_s_ = limit_from_now(t_, world);
  if (limit_s_ > 0 && world.rank() == 0)
    log::info("time limit: {} left ({}); the run saves and stops before it", format_duration(std::round(limit_s_)),
              duration_text());
}

std::string kill_switch_at_start(const TrainSection& t, comm::Communicator& world) {
  std::error_code ec;
  // 1: the switch is there; 2: a directory is (a mistake, refused as the config's check refuses it, not a switch).
  int32_t killed = world.rank() != 0 || !file_exists(t.kill_switch) ? 0 : fs::is_directory(t.kill_switch, ec) ? 2 : 1;
  max_over(world, &killed, 1);
  PARALLM_CHECK(killed != 2, ConfigError, "config",
                "train.kill_switch={}: is a directory; the switch is a file that appears (touch it) when wanted",
                t.kill_switch);
  if (!killed) return "";
  return fmt::format(
      "train.kill_switch {} exists: the run did not start, and nothing in {} was read or written "
      "(delete the file to let runs start)",
      t.kill_switch, t.out_dir);
}

double RunControl::time_left_s() const {
  return limit_s_ > 0 ? limit_s_ - clock_.seconds() : std::numeric_limits<double>::infinity();
}

std::string RunControl::duration_text() const {
  return t_.max_duration_s == kDurationAuto ? "train.max_duration=auto: the job's end time"
                                            : "train.max_duration=" + format_duration(t_.max_duration_s);
}

ControlDecision RunControl::vote(int64_t it, double iter_s, bool records_ok) {
  longest_iter_s_ = std::max(longest_iter_s_, iter_s);
  const double margin = 2 * (longest_iter_s_ + last_save_s_);
  int32_t f[kFlags] = {};
  if (world_.rank() == 0) {  // one rank asks the filesystem (its metadata server), not every rank
    f[kKill] = file_exists(t_.kill_switch);
    f[kSave] = file_exists(t_.save_switch);
  }
  if (const int sig = stop_signal::first()) f[kSignal] = sig << kRankBits | world_.rank();
  f[kDuration] = limit_s_ > 0 && clock_.seconds() + margin > limit_s_;
  f[kRecords] = !records_ok;
  max_over(world_, f, kFlags);

  ControlDecision d;
  d.records_lost = f[kRecords] != 0;
  d.stop = f[kKill] || f[kSignal] || f[kDuration];
  d.save = d.stop || f[kSave];
  if (f[kKill]) {
    d.why = fmt::format("train.kill_switch {} exists", t_.kill_switch);
  } else if (f[kSignal]) {
    d.why = fmt::format("{} received by rank {}", stop_signal::name(f[kSignal] >> kRankBits),
                        f[kSignal] & ((1 << kRankBits) - 1));
  } else if (f[kDuration]) {
    // Counted from the process's start, as the limit is (setup included): used + left = the limit.
    d.why = fmt::format(
        "{} is near: {:.2f} s used since the process started, {:.2f} s left, and the next iteration with a save "
        "may take 2 x (longest iteration {:.2f} s + last save {:.2f} s) = {:.2f} s",
        duration_text(), process_age_s(), std::max(0.0, time_left_s()), longest_iter_s_, last_save_s_, margin);
  } else if (f[kSave]) {
    d.why = fmt::format("train.save_switch {} appeared", t_.save_switch);
  }
  if (d.save && world_.rank() == 0) log::info("after iteration {}: {}", it, d.why);
  return d;
}

void RunControl::saved(const ControlDecision& d, double seconds) {
  last_save_s_ = seconds;
  if (!d.save || world_.rank() != 0 || !file_exists(t_.save_switch)) return;
  std::error_code ec;
  fs::remove(t_.save_switch, ec);
  if (ec)
    log::warn("train.save_switch {}: could not delete it ({}); it will ask for another save", t_.save_switch,
              ec.message());
}

}  // namespace parallm::train
