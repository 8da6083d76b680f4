#include "train/config/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "core/host.h"
#include "model/gpt.h"
#include "model/params.h"
#include "parallel/zero.h"

namespace parallm::train {

namespace {
// Bytes per parameter of the training state one rank holds, by the quick rule.
PlanBytes state_per_param(const std::string& dtype, int stage, int world) {
  const bool bf16 = dtype == "bf16";
  const double w = world, p = bf16 ? 2 : 4, g = 4, o = bf16 ? 12 : 8;
  PlanBytes b;
  b.params = stage == 3 ? p / w : p;
  b.grads = stage >= 2 ? g / w : g;
  b.optimizer = stage >= 1 ? o / w : o;
  return b;
}
}  // namespace

double state_bytes_per_param(const std::string& dtype, int stage, int world) {
  return state_per_param(dtype, stage, world).state();
}

PlanBytes plan_memory(const PlanInput& in, int stage) {
  PARALLM_CHECK(stage >= 0 && stage <= 3, ConfigError, "plan", "zero.stage must be 0..3, got {}", stage);
  PARALLM_CHECK(in.world >= 1, ConfigError, "plan", "the world size must be >= 1, got {}", in.world);
  PARALLM_CHECK(in.tp >= 1, ConfigError, "plan", "parallel.tp must be >= 1, got {}", in.tp);
  PARALLM_CHECK(in.dtype == "fp32" || in.dtype == "bf16", ConfigError, "plan", "dtype must be fp32 or bf16, got {}",
                in.dtype);
  PlanBytes b;
  if (!in.model || in.dtype != "fp32") {
    // The quick rules: the state only (no shape, or bf16: the seeds' 18 B/param mixed-precision rule,
    // which is the GPU's layout; CPU bf16 keeps fp32 state, i.e. plan it as fp32, plus a 2 B/param
    // bf16 weight copy and bf16 scratch).
    const double n =
        in.model ? static_cast<double>(model::ParamLayout(*in.model, model::ShardSpec{in.tp, 0, in.ep, 0}).count())
                 : in.params;
    const PlanBytes q = state_per_param(in.dtype, stage, in.world);
    b.params = n * q.params;
    b.grads = n * q.grads;
    b.optimizer = n * q.optimizer;
    if (stage > 0 && in.offload != parallel::Offload::None) {  // the optimizer state on the host
      b.offloaded = b.optimizer;
      b.optimizer = 0;
    }
    if (stage == 3 && in.offload == parallel::Offload::Params) {  // and the parameter shard
      b.offloaded += b.params;
      b.params = 0;
    }
    return b;
  }
  // fp32 with a shape: the model's and ZeRO's own sizing, in bytes.
  const model::ParamLayout layout(*in.model, model::ShardSpec{in.tp, 0, in.ep, 0},
                                  in.pipe.stage);  // every tp rank's parts: the same shapes
  const auto total = static_cast<double>(layout.total());
  parallel::Offload off = in.offload;
  if (stage == 0 || (off == parallel::Offload::Params && stage < 3)) off = parallel::Offload::None;
  const auto z = stage > 0 ? parallel::Zero::sizes(layout, stage, in.world * in.cp.size, 0, in.prefetch, off)
                           : parallel::ZeroSizes{};
  const double f = sizeof(float);
  b.params = f * ((stage < 3 ? total : 0) + static_cast<double>(z.params));
  b.grads = f * ((stage < 2 ? total : 0) + static_cast<double>(z.grads));
  const double moments = f * 2 * (stage > 0 ? static_cast<double>(z.shard) : total);
  (off == parallel::Offload::None ? b.optimizer : b.offloaded) = moments;
  b.offloaded += f * static_cast<double>(z.offloaded);
  b.comm = f * static_cast<double>(z.comm);
  const auto buf = model::GPT::buffers(*in.model, in.micro_batch, in.seq_len / in.cp.size, Device::cpu(), in.threads,
                                       DType::F32, in.tp, in.sequence_parallel, in.pipe, in.cp, in.ep);
  b.activations = static_cast<double>(buf.activation_bytes);
  b.scratch = static_cast<double>(buf.scratch_bytes);
  b.exact = true;
  return b;
}

uint64_t min_run_bytes(const model::GPTConfig& m, int64_t micro_batch, int stage) {
  auto u = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); };
  const uint64_t whole_floats_per_param = stage <= 0 ? 4 : stage == 1 ? 2 : stage == 2 ? 1 : 0;
  const uint64_t state = sat_mul(sat_mul(4, whole_floats_per_param), m.num_params());
  const uint64_t NC = sat_mul(sat_mul(u(micro_batch), u(m.block_size)), u(m.n_embd));
  const uint64_t acts = sat_mul(sat_mul(4, NC), sat_add(sat_mul(16, u(m.n_layer)), 13));
  return sat_add(state, acts);
}

int64_t gpus_needed(double params, double gpu_gb) {
  PARALLM_CHECK(gpu_gb > 0, ConfigError, "plan", "device memory must be > 0");
  return static_cast<int64_t>(std::ceil(params / 1e9 * 18.0 * 1.25 / gpu_gb - 1e-9));
}

int stage_that_fits(const PlanInput& in, double device_bytes) {
  for (int s = 0; s <= 3; ++s)
    if (plan_memory(in, s).total() <= device_bytes) return s;
  return -1;
}

namespace {
double parse_scaled(const std::string& s, const std::string& what, bool bytes) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw ConfigError("plan", fmt::format("{}: \"{}\" is not a number", what, s));
  }
  std::string unit = s.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty()) scale = 1;
  if (bytes) {
    if (unit == "B") scale = 1;
    if (unit == "KB") scale = 1e3;
    if (unit == "MB") scale = 1e6;
    if (unit == "GB" || unit == "G") scale = 1e9;
    if (unit == "TB") scale = 1e12;
    if (unit == "KIB") scale = 1024.0;
    if (unit == "MIB") scale = 1024.0 * 1024;
    if (unit == "GIB") scale = 1024.0 * 1024 * 1024;
  } else {
    if (unit == "K") scale = 1e3;
    if (unit == "M") scale = 1e6;
    if (unit == "B" || unit == "G") scale = 1e9;
    if (unit == "T") scale = 1e12;
  }
  PARALLM_CHECK(scale > 0, ConfigError, "plan", "{}: unknown unit \"{}\" in \"{}\" (use {})", what, s.substr(pos), s,
                bytes ? "B, KB, MB, GB, TB, KiB, MiB or GiB" : "K, M, B or T");
  PARALLM_CHECK(v > 0 && std::isfinite(v), ConfigError, "plan", "{} must be positive, got \"{}\"", what, s);
  return v * scale;
}
}  // namespace

double parse_count(const std::string& s, const std::string& what) {
  return parse_scaled(s, what, false);
}
double parse_bytes(const std::string& s, const std::string& what) {
  return parse_scaled(s, what, true);
}

}  // namespace parallm::train
