// The doctor's GPU checks (doctor_gpu.h).
#include "cli/doctor_gpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/gpu.h"
#include "core/nvml.h"
#include "core/rng.h"
#include "kernels/ops.h"

namespace parallm::cli {

namespace {
// GPUs each node should have: --gpus, else Slurm's count for this node, else -1.
int expected_gpus(int said) {
  if (said >= 0) return said;
  const char* s = std::getenv("SLURM_GPUS_ON_NODE");
  return s && *s ? std::atoi(s) : -1;
}

// NVML's view of this node (the first rank of a node only).
void node_health(const GpuCheckOptions& o, std::vector<std::string>& lines, std::vector<std::string>& problems) {
  const nvml::Report r = nvml::query();
  const int cuda = gpu::device_count();
  const int want = expected_gpus(o.expected);
  // The GPUs this job can use: CUDA's (CUDA_VISIBLE_DEVICES applies), else NVML's (the node's).
  const int usable = cuda > 0 ? cuda : static_cast<int>(r.gpus.size());
  if (!r.loaded && cuda == 0) {
    lines.push_back(fmt::format("no GPU found: {}; {}",
                                gpu::built() ? "CUDA sees no device" : "parallm was built without CUDA", r.why));
  } else {
    lines.push_back(fmt::format("{} GPU{} seen by NVML{}, {} visible to CUDA{}", r.gpus.size(),
                                r.gpus.size() == 1 ? "" : "s",
                                r.loaded ? fmt::format(" (driver {})", r.driver) : fmt::format(" ({})", r.why), cuda,
                                want >= 0 ? fmt::format(", {} expected", want) : ""));
    for (const nvml::Gpu& g : r.gpus) {
      lines.push_back(fmt::format("gpu {}: {}", g.index, nvml::describe(g)));
      if (const std::string p = nvml::problems(g); !p.empty())
        problems.push_back(fmt::format("gpu {}: {}", g.index, p));
    }
  }
  if (want >= 0 && usable < want)
    problems.push_back(fmt::format("{} GPU{} expected on this node, {} usable (CUDA {}, NVML {})", want,
                                   want == 1 ? "" : "s", usable, cuda, r.gpus.size()));
}

// A pattern written to `mem_mb` of device memory and read back.
std::string memory_check(int64_t mem_mb) {
  constexpr size_t kChunk = size_t{16} << 20;
  const size_t bytes = static_cast<size_t>(mem_mb) << 20;
  auto* d = static_cast<char*>(gpu::device_alloc(bytes, MemCategory::Other));
  std::vector<uint32_t> host(kChunk / 4), back(kChunk / 4);
  std::string bad;
  auto fill = [&](size_t c) {
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>(c);
  };
  for (size_t c = 0; c * kChunk < bytes; ++c) {
    fill(c);
    gpu::memcpy_h2d(d + c * kChunk, host.data(), std::min(kChunk, bytes - c * kChunk));
  }
  for (size_t c = 0; c * kChunk < bytes && bad.empty(); ++c) {
    const size_t n = std::min(kChunk, bytes - c * kChunk);
    fill(c);
    gpu::memcpy_d2h(back.data(), d + c * kChunk, n);
    if (std::memcmp(back.data(), host.data(), n) != 0)
      bad = fmt::format("memory read back wrong in MiB {}", (c * kChunk) >> 20);
  }
  gpu::device_free(d, bytes, MemCategory::Other);
  return bad;
}

// A 256 x 512 x 384 fp32 GEMM on the device against the CPU's; returns the relative error.
double gemm_check() {
  constexpr int64_t N = 256, IN = 512, OUT = 384;
  std::vector<float> x(N * IN), w(OUT * IN), want(N * OUT), got(N * OUT);
  fill_uniform(x.data(), N * IN, -1, 1, 1234, 1);
  fill_uniform(w.data(), OUT * IN, -1, 1, 1234, 2);
  kernels::ops_for(Device::cpu()).matmul_forward(want.data(), x.data(), w.data(), nullptr, N, IN, OUT);
  const size_t bx = x.size() * 4, bw = w.size() * 4, bo = got.size() * 4;
  auto* dx = static_cast<float*>(gpu::device_alloc(bx, MemCategory::Other));
  auto* dw = static_cast<float*>(gpu::device_alloc(bw, MemCategory::Other));
  auto* dout = static_cast<float*>(gpu::device_alloc(bo, MemCategory::Other));
  gpu::memcpy_h2d(dx, x.data(), bx);
  gpu::memcpy_h2d(dw, w.data(), bw);
  kernels::ops_for(Device::cuda(gpu::current_device())).matmul_forward(dout, dx, dw, nullptr, N, IN, OUT);
  gpu::synchronize();
  gpu::memcpy_d2h(got.data(), dout, bo);
  gpu::device_free(dx, bx, MemCategory::Other);
  gpu::device_free(dw, bw, MemCategory::Other);
  gpu::device_free(dout, bo, MemCategory::Other);
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return std::isfinite(err) ? err / std::max(scale, 1e-30) : INFINITY;
}
}  // namespace

std::vector<std::string> check_gpus(const comm::RankPlace& place, const GpuCheckOptions& o,
                                    std::vector<std::string>& problems) {
  std::vector<std::string> lines;
  if (place.local_rank == 0) node_health(o, lines, problems);
  const int count = gpu::device_count();
  if (count == 0) return lines;
  const int back_to = gpu::current_device();
  for (int d = place.local_rank; d < count; d += std::max(1, place.local_size)) {
    try {
      gpu::set_device(d);
      const std::string mem = memory_check(o.mem_mb);
      const double err = gemm_check();
      const bool gemm_ok = err <= 1e-4;
      lines.push_back(
          fmt::format("gpu {}: {}: memory check of {} MiB {}, fp32 GEMM against the CPU's {} (max error "
                      "{:.1e} of the largest value)",
                      d, gpu::describe(d), o.mem_mb, mem.empty() ? "OK" : "FAILED", gemm_ok ? "OK" : "WRONG", err));
      if (!mem.empty()) problems.push_back(fmt::format("cuda device {}: {}", d, mem));
      if (!gemm_ok)
        problems.push_back(fmt::format("cuda device {}: fp32 GEMM off by {:.1e} of the largest value", d, err));
    } catch (const Error& e) {
      problems.push_back(fmt::format("cuda device {}: {}", d, e.what()));
    }
  }
  gpu::set_device(back_to);
  return lines;
}

}  // namespace parallm::cli
