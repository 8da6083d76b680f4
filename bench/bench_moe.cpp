// The experts' grouped product against a dense one of the same FLOPs: an MoE
// layer's experts (gate, up, SwiGLU, down; forward and backward) run as one
// GEMM per expert over its rows, with uneven counts (expert e's share of the
// N x K routed rows proportional to 1 / (e + 1)^skew, some experts possibly
// empty), against one dense SwiGLU MLP over all N x K rows with one expert's
// weights: the same arithmetic in one product per matrix. Prints the grouped
// product's FLOP/s as a share of the dense one's, measured in the same run.
// CPU fp32 by default; --device cuda (a CUDA build with a GPU) bf16.
//   ./build/bench/bench_moe [-N 4096] [-C 512] [-F 256] [-E 16] [-K 2] [--skew 0.5]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/device_array.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "kernels/ops.h"

using namespace parallm;

namespace {

struct Shape {
  int64_t N, C, F, E, K;
};

// The rows of each expert: N K routed rows split by 1 / (e + 1)^skew, rounding to the largest shares.
std::vector<int64_t> uneven_counts(const Shape& s, double skew) {
  std::vector<double> w(static_cast<size_t>(s.E));
  double sum = 0;
  for (int64_t e = 0; e < s.E; ++e) sum += w[static_cast<size_t>(e)] = 1.0 / std::pow(e + 1.0, skew);
  std::vector<int64_t> c(static_cast<size_t>(s.E));
  int64_t given = 0;
  for (int64_t e = 0; e < s.E; ++e)
    given += c[static_cast<size_t>(e)] = static_cast<int64_t>(s.N * s.K * w[static_cast<size_t>(e)] / sum);
  c[0] += s.N * s.K - given;
  return c;
}

double median_ms(const std::function<void()>& f, bool gpu_sync, int reps) {
  f();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    if (gpu_sync) gpu::synchronize();
    const auto a = std::chrono::steady_clock::now();
    f();
    if (gpu_sync) gpu::synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class A>
void run(const kernels::ModelOps<A>& k, const Shape& s, const std::vector<int64_t>& counts, Device dev, int reps) {
  const int64_t R = s.N * s.K;
  auto act = [&](int64_t n) { return DeviceArray<A>(static_cast<size_t>(n), MemCategory::Scratch, dev); };
  auto f32 = [&](int64_t n) { return DeviceArray<float>(static_cast<size_t>(n), MemCategory::Scratch, dev); };
  auto x = act(R * s.C), hg = act(R * s.F), hu = act(R * s.F), ha = act(R * s.F), y = act(R * s.C);
  auto dx = act(R * s.C), dh = act(2 * R * s.F), dtmp = act(R * s.C);
  auto wg = act(s.E * s.F * s.C), wu = act(s.E * s.F * s.C), wd = act(s.E * s.C * s.F);
  auto dwg = f32(s.E * s.F * s.C), dwu = f32(s.E * s.F * s.C), dwd = f32(s.E * s.C * s.F);
  for (auto* a : {&x, &wg, &wu, &wd}) k.fill(a->data(), static_cast<int64_t>(a->size()), 0.01f);
  // One expert's passes over rows [r0, r0 + n) with weights at expert e.
  auto expert = [&](int64_t e, int64_t r0, int64_t n) {
    const int64_t wo = e * s.F * s.C;
    k.matmul_forward(hg.data() + r0 * s.F, x.data() + r0 * s.C, wg.data() + wo, nullptr, n, s.C, s.F);
    k.matmul_forward(hu.data() + r0 * s.F, x.data() + r0 * s.C, wu.data() + wo, nullptr, n, s.C, s.F);
    k.swiglu_forward(ha.data() + r0 * s.F, hg.data() + r0 * s.F, hu.data() + r0 * s.F, n * s.F);
    k.matmul_forward(y.data() + r0 * s.C, ha.data() + r0 * s.F, wd.data() + wo, nullptr, n, s.F, s.C);
    A* dg = dh.data() + r0 * s.F;
    A* du = dh.data() + R * s.F + r0 * s.F;
    k.matmul_backward(du, dwd.data() + wo, nullptr, y.data() + r0 * s.C, ha.data() + r0 * s.F, wd.data() + wo, n, s.F,
                      s.C);
    k.swiglu_backward(dg, du, du, hg.data() + r0 * s.F, hu.data() + r0 * s.F, n * s.F);
    k.matmul_backward(dx.data() + r0 * s.C, dwg.data() + wo, nullptr, dg, x.data() + r0 * s.C, wg.data() + wo, n, s.C,
                      s.F);
    k.matmul_backward(dtmp.data() + r0 * s.C, dwu.data() + wo, nullptr, du, x.data() + r0 * s.C, wu.data() + wo, n, s.C,
                      s.F);
  };
  const bool sync = !dev.is_cpu();
  const double dense = median_ms([&] { expert(0, 0, R); }, sync, reps);
  const double grouped = median_ms(
      [&] {
        int64_t r0 = 0;
        for (int64_t e = 0; e < s.E; ++e) {
          if (counts[static_cast<size_t>(e)] > 0) expert(e, r0, counts[static_cast<size_t>(e)]);
          r0 += counts[static_cast<size_t>(e)];
        }
      },
      sync, reps);
  const double flops = 3.0 * 2.0 * 3.0 * static_cast<double>(R) * s.C * s.F;  // 3 products, forward + 2 backward
  std::printf("dense   %8.3f ms  %8.1f GFLOP/s\n", dense, flops / dense / 1e6);
  std::printf("grouped %8.3f ms  %8.1f GFLOP/s\n", grouped, flops / grouped / 1e6);
  std::printf("grouped / dense FLOP/s: %.1f%%\n", 100.0 * dense / grouped);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the experts' grouped product against a dense one of the same FLOPs"};
  Shape s{4096, 512, 256, 16, 2};
  double skew = 0.5;
  int reps = 5;
  std::string device = "cpu";
  app.add_option("-N", s.N, "tokens");
  app.add_option("-C", s.C, "model width");
  app.add_option("-F", s.F, "each expert's hidden width");
  app.add_option("-E", s.E, "experts");
  app.add_option("-K", s.K, "experts per token");
  app.add_option("--skew", skew, "expert e's share of the rows is proportional to 1 / (e + 1)^skew");
  app.add_option("--reps", reps, "timed repetitions (the median is reported)");
  app.add_option("--device", device, "cpu (fp32) or cuda (bf16)");
  CLI11_PARSE(app, argc, argv);
  const std::vector<int64_t> counts = uneven_counts(s, skew);
  std::printf("N %ld C %ld F %ld E %ld K %ld: rows per expert %ld (most) .. %ld (least), skew %.2f\n",
              static_cast<long>(s.N), static_cast<long>(s.C), static_cast<long>(s.F), static_cast<long>(s.E),
              static_cast<long>(s.K), static_cast<long>(counts.front()), static_cast<long>(counts.back()), skew);
  const Device dev = parse_device(device);
  if (dev.is_cpu())
    run(kernels::ops_for(dev), s, counts, dev, reps);
  else
    run(kernels::bf16_ops_for(dev), s, counts, dev, reps);
  return 0;
}
