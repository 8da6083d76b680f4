// ZeRO's buffers on the GPU (parallel/zero.h with a cuda device) against the
// same Zero on the host, one rank (the self communicator: a group of one
// shards nothing away, but every copy, zeroing, addition, square sum and
// window of the device path runs): at each stage, with and without the
// optimizer offloaded, the gradient shard and the parameter pieces equal the
// host's bit for bit, the norm to double rounding (the device's own order of
// the sum), stage 3's gathered windows hold the groups loaded, an update
// written through the optimizer's buffers is what the parameters hold after
// gather_params(), and parameters written from the host read back. The
// deterministic reduction's sums (ddp.deterministic, three shards on one
// rank, two micro-steps) on the device equal the host's bit for bit. Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm/communicator.h"
#include "core/device_array.h"
#include "core/gpu.h"
#include "kernels/cuda_test_util.h"
#include "model/params.h"
#include "parallel/deterministic.h"
#include "parallel/zero.h"

namespace parallm {
namespace {

class CudaZero : public test::Cuda {};

model::GPTConfig odd_gpt() {
  model::GPTConfig c;
  c.n_layer = 3;
  c.n_head = 3;
  c.n_embd = 30;
  c.block_size = 7;
  c.vocab_size = 53;
  return c;
}

// Group g's gradient for micro-step k: a value per element that no two elements share.
float grad_value(int64_t e, int k) {
  return std::sin(0.37f * static_cast<float>(e) + static_cast<float>(k)) * (1.0f + 0.01f * static_cast<float>(k));
}

struct Outcome {
  std::vector<float> grads, params, updated;  // this rank's gradient and parameter pieces (host copies), then updated
  double norm = 0;
};

// Two micro-steps of gradients through `z` (stage 1: the model's full gradient buffer `grads` on `dev`; stages
// 2, 3: the windows), then the norm and the pieces.
Outcome run(parallel::Zero& z, const model::ParamLayout& layout, Device dev, float* grads) {
  z.begin_step();
  std::vector<float> host(static_cast<size_t>(layout.total()), 0.0f);
  for (int k = 0; k < 2; ++k) {
    for (int64_t e = 0; e < layout.total(); ++e) host[static_cast<size_t>(e)] += grad_value(e, k);
    if (z.stage() == 1) continue;
    for (int g = layout.num_groups() - 1; g >= 0; --g) {
      const auto r = layout.group(g);
      std::vector<float> part(static_cast<size_t>(r.end - r.begin));
      for (int64_t e = r.begin; e < r.end; ++e) part[static_cast<size_t>(e - r.begin)] = grad_value(e, k);
      float* w = z.grads(g);
      if (dev.is_cpu())
        std::copy(part.begin(), part.end(), w);
      else
        gpu::memcpy_h2d(w, part.data(), part.size() * sizeof(float));
      z.grads_done(g);
    }
  }
  if (z.stage() == 1) {
    if (dev.is_cpu())
      std::copy(host.begin(), host.end(), grads);
    else
      gpu::memcpy_h2d(grads, host.data(), host.size() * sizeof(float));
  }
  z.finish_grads();
  Outcome o;
  o.norm = z.grad_norm();
  o.grads.resize(static_cast<size_t>(z.shard_size()));
  if (z.opt_grads() == nullptr) return o;
  const bool host_grads = z.optimizer_device().is_cpu() || dev.is_cpu();
  // Stage 1 without offload: the pieces sit in the full buffer; else the shard is contiguous.
  for (const auto& p : z.pieces()) {
    const float* src = z.opt_grads() + (z.stage() == 1 && z.offload() == parallel::Offload::None ? p.flat : p.local);
    if (host_grads)
      std::copy(src, src + p.count, o.grads.data() + p.local);
    else
      gpu::memcpy_d2h(o.grads.data() + p.local, src, static_cast<size_t>(p.count) * sizeof(float));
  }
  o.params.resize(static_cast<size_t>(z.shard_size()));
  z.params_to_host(o.params.data());
  // An update through the optimizer's buffers (each piece + 1), gathered: the parameters hold it.
  const bool host_opt = z.optimizer_device().is_cpu();
  for (const auto& p : z.pieces()) {
    std::vector<float> up(o.params.begin() + p.local, o.params.begin() + p.local + p.count);
    for (float& x : up) x += 1.0f;
    float* dst = z.opt_params() + (z.stage() < 3 && z.offload() == parallel::Offload::None ? p.flat : p.local);
    if (host_opt)
      std::copy(up.begin(), up.end(), dst);
    else
      gpu::memcpy_h2d(dst, up.data(), up.size() * sizeof(float));
  }
  z.gather_params();
  o.updated.resize(o.params.size());
  z.params_to_host(o.updated.data());
  for (size_t i = 0; i < o.params.size(); ++i) EXPECT_EQ(o.updated[i], o.params[i] + 1.0f) << i;
  // And back from the host (a checkpoint's load): what was written is what is read.
  std::vector<float> back(o.params.size()), again(o.params.size());
  for (size_t i = 0; i < back.size(); ++i) back[i] = static_cast<float>(i) * 0.5f;
  z.params_from_host(back.data());
  z.params_to_host(again.data());
  EXPECT_EQ(again, back);
  return o;
}

TEST_F(CudaZero, EveryStageOnTheDeviceEqualsTheHostBitForBit) {
  const model::ParamLayout layout(odd_gpt());
  auto self = comm::make_world("self");
  std::vector<float> init(static_cast<size_t>(layout.total()));
  for (int64_t e = 0; e < layout.total(); ++e) init[static_cast<size_t>(e)] = 0.01f * static_cast<float>(e % 97);
  const Device cuda = Device::cuda(0);
  for (int stage : {1, 2, 3})
    for (parallel::Offload off : {parallel::Offload::None, parallel::Offload::Optimizer, parallel::Offload::Params}) {
      if (off == parallel::Offload::Params && stage != 3) continue;
      SCOPED_TRACE("stage " + std::to_string(stage) + ", offload " + parallel::offload_name(off));
      Outcome out[2];
      for (int d = 0; d < 2; ++d) {
        const Device dev = d == 0 ? Device::cpu() : cuda;
        DeviceArray<float> params(static_cast<size_t>(layout.total()), MemCategory::Params, dev);
        DeviceArray<float> grads(static_cast<size_t>(layout.total()), MemCategory::Grads, dev);
        params.copy_from_host(init.data(), init.size());
        parallel::Zero z(*self, layout, stage, stage < 3 ? params.data() : nullptr, stage == 1 ? grads.data() : nullptr,
                         1, off, nullptr, nullptr, dev);
        if (stage == 3) {
          for (int g = 0; g < layout.num_groups(); ++g) z.load_group(g, init.data() + layout.group(g).begin);
          // The windows hold the groups loaded, in any order asked.
          for (int g : {2, 0, 3, 1, 2}) {
            const auto r = layout.group(g);
            std::vector<float> got(static_cast<size_t>(r.end - r.begin));
            const float* w = z.params(g, model::Pass::Forward);
            if (dev.is_cpu())
              std::copy(w, w + got.size(), got.begin());
            else
              gpu::memcpy_d2h(got.data(), w, got.size() * sizeof(float));
            for (int64_t e = r.begin; e < r.end; ++e)
              ASSERT_EQ(got[static_cast<size_t>(e - r.begin)], init[static_cast<size_t>(e)]) << "group " << g;
            z.release_params(g, model::Pass::Forward);
          }
        }
        z.params_changed();
        out[d] = run(z, layout, dev, grads.data());
        EXPECT_EQ(z.optimizer_device().is_cpu(), dev.is_cpu() || off != parallel::Offload::None);
      }
      // The device sums its squares in its own (fixed) order.
      EXPECT_NEAR(out[1].norm, out[0].norm, 1e-12 * out[0].norm);
      EXPECT_EQ(out[1].grads, out[0].grads);
      EXPECT_EQ(out[1].params, out[0].params);
      EXPECT_EQ(out[1].updated, out[0].updated);
      EXPECT_GT(out[0].norm, 0.0);
    }
}

TEST_F(CudaZero, DeterministicSumsOnTheDeviceEqualTheHost) {
  auto self = comm::make_world("self");
  const int64_t n = 1001;
  std::vector<float> out[2];
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? Device::cpu() : Device::cuda(0);
    parallel::DeterministicGrads det(*self, n, 3, dev);
    DeviceArray<float> g(static_cast<size_t>(n), MemCategory::Grads, dev);
    std::vector<float> h(static_cast<size_t>(n));
    det.begin_step();
    for (int micro = 0; micro < 2; ++micro) {
      for (int j = 0; j < 3; ++j) {
        for (int64_t e = 0; e < n; ++e) h[static_cast<size_t>(e)] = grad_value(e * 7 + j, micro);
        g.copy_from_host(h.data(), h.size());
        det.add_shard(j, g.data());
      }
      det.end_micro_step(g.data());
    }
    det.finish(g.data());
    out[d].resize(static_cast<size_t>(n));
    g.copy_to_host(out[d].data(), out[d].size());
  }
  EXPECT_EQ(out[1], out[0]);
}

}  // namespace
}  // namespace parallm
