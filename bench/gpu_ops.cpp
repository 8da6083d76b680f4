// Where a GPU training step goes: times every kernel of the GPT's forward and
// backward at one shape (default GPT-2 124M, batch 16 x 1024) in fp32 or bf16,
// multiplies by its calls per step, and sets the sum beside a measured full
// step of the model (forward + backward, same shape). Prints per-op ms per
// step, share, and TFLOP/s for the products. Needs a CUDA build and a GPU.
//   ./build-cuda/bench/bench_gpu_ops [--dtype bf16] [-B 16] [-T 1024] [-L 12] [-C 768] [-H 12] [-V 50304]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/device_array.h"
#include "core/error.h"
#include "core/gpu.h"
#include "kernels/ops.h"
#include "model/gpt.h"

using namespace parallm;

namespace {

struct Row {
  std::string name;
  int per_step;
  double ms, flops;
};

double time_ms(const std::function<void()>& f, int reps = 5) {
  f();  // warm-up: caches, cuBLAS heuristics
  gpu::Event a, b;
  a.record();
  for (int i = 0; i < reps; ++i) f();
  b.record();
  b.wait();
  return b.elapsed_ms_since(a) / reps;
}

template <class A>
std::vector<Row> profile_ops(const kernels::ModelOps<A>& k, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t V,
                             int L, bool with_bias, Device dev) {
  const int64_t N = B * T;
  auto big = [&](int64_t n) { return DeviceArray<A>(n, MemCategory::Scratch, dev); };
  auto f32 = [&](int64_t n) { return DeviceArray<float>(n, MemCategory::Scratch, dev); };
  auto x = big(N * 4 * C), y = big(N * 4 * C), z = big(N * 4 * C), w = big(4 * C * C + V * C), bias = big(4 * C);
  auto dw = f32(V * C), db = f32(4 * C), dpos = f32(T * C), mean = f32(N), rstd = f32(N), lse = f32(B * NH * T),
       losses = f32(N);
  auto ws = f32(std::max(k.attention_workspace_floats(B, T, C, NH, 1), k.classifier_workspace_floats(N, V, 1)));
  auto lnw = big(C), lnb = big(C), pos = big(T * C);
  // Tokens spread over the vocabulary (a step of real text has many distinct
  // tokens; embedding backward's time depends on the longest run of one token).
  std::vector<int32_t> host_tok(N);
  for (int64_t i = 0; i < N; ++i) host_tok[i] = static_cast<int32_t>((i * 7919) % V);
  DeviceArray<int32_t> tok(N, MemCategory::Scratch, dev);
  tok.copy_from_host(host_tok.data(), N);
  const auto gelu = model::GPTConfig{}.gelu;  // the model's
  std::vector<Row> r;
  auto mm = [&](const char* name, int64_t IN, int64_t OUT) {
    const double fl = 2.0 * N * IN * OUT;
    r.push_back({std::string(name) + " fwd", L, time_ms([&] {
                   k.matmul_forward(y.data(), x.data(), w.data(), with_bias ? bias.data() : nullptr, N, IN, OUT);
                 }),
                 fl});
    r.push_back({std::string(name) + " bwd", L, time_ms([&] {
                   k.matmul_backward(z.data(), dw.data(), with_bias ? db.data() : nullptr, y.data(), x.data(), w.data(),
                                     N, IN, OUT);
                 }),
                 2 * fl});
  };
  mm("matmul qkv", C, 3 * C);
  mm("matmul attn proj", C, C);
  mm("matmul fc", C, 4 * C);
  mm("matmul fc proj", 4 * C, C);
  const double attn_fl = 4.0 * B * NH * T * T * (C / NH);  // QK^T and PV, full square
  r.push_back({"attention fwd", L,
               time_ms([&] { k.attention_forward(y.data(), lse.data(), x.data(), B, T, C, NH, {}, ws.data()); }),
               attn_fl});
  r.push_back({"attention bwd", L, time_ms([&] {
                 k.attention_backward(z.data(), y.data(), x.data(), y.data(), lse.data(), B, T, C, NH, {}, ws.data());
               }),
               2 * attn_fl});
  r.push_back({"layernorm fwd", 2 * L + 1, time_ms([&] {
                 k.layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), lnw.data(), lnb.data(), N, C);
               }),
               0});
  r.push_back({"layernorm bwd", 2 * L + 1, time_ms([&] {
                 k.layernorm_backward(z.data(), dw.data(), db.data(), y.data(), x.data(), lnw.data(), mean.data(),
                                      rstd.data(), N, C);
               }),
               0});
  r.push_back({"gelu fwd", L, time_ms([&] { k.gelu_forward(y.data(), x.data(), N * 4 * C, gelu); }), 0});
  r.push_back({"gelu bwd", L, time_ms([&] { k.gelu_backward(z.data(), x.data(), y.data(), N * 4 * C, gelu); }), 0});
  r.push_back({"residual", 2 * L, time_ms([&] { k.residual_forward(z.data(), x.data(), y.data(), N * C); }), 0});
  r.push_back({"classifier fwd+bwd", 1, time_ms([&] {
                 k.classifier_forward_backward(losses.data(), y.data(), dw.data(), x.data(), w.data(), tok.data(), N, C,
                                               V, 1.0f / N, ws.data());
               }),
               6.0 * N * C * V});
  r.push_back({"embedding fwd", 1,
               time_ms([&] { k.embedding_forward(y.data(), tok.data(), w.data(), pos.data(), B, T, C); }), 0});
  r.push_back({"embedding bwd", 1,
               time_ms([&] { k.embedding_backward(dw.data(), dpos.data(), x.data(), tok.data(), B, T, C); }), 0});
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-kernel time of a GPU training step, beside a measured step"};
  std::string dtype = "bf16";
  int64_t B = 16, T = 1024, C = 768, NH = 12, V = 50304;
  int L = 12;
  bool bias = false;  // as the gpt2 run of tools/device/gpu_check.sh and the PyTorch peer
  app.add_option("--dtype", dtype, "fp32 or bf16")->capture_default_str();
  app.add_option("-B", B, "batch")->capture_default_str();
  app.add_option("-T", T, "sequence length")->capture_default_str();
  app.add_option("-C", C, "width")->capture_default_str();
  app.add_option("-H", NH, "heads")->capture_default_str();
  app.add_option("-V", V, "vocabulary")->capture_default_str();
  app.add_option("-L", L, "layers")->capture_default_str();
  app.add_option("--bias", bias, "linear layers and LayerNorms with biases (0 or 1)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (!gpu::available()) {
      std::printf("bench_gpu_ops: no GPU (%s)\n", gpu::built() ? "none visible" : "CUDA not built");
      return 0;
    }
    const Device dev = parse_device("cuda");
    gpu::set_device(0);
    const bool bf = parse_dtype(dtype) == DType::BF16;
    auto rows = bf ? profile_ops(kernels::bf16_ops_for(dev), B, T, C, NH, V, L, bias, dev)
                   : profile_ops<float>(kernels::ops_for(dev), B, T, C, NH, V, L, bias, dev);
    double total = 0;
    for (const auto& r : rows) total += r.ms * r.per_step;
    std::sort(rows.begin(), rows.end(),
              [](const Row& a, const Row& b) { return a.ms * a.per_step > b.ms * b.per_step; });
    std::printf("%s, B=%ld T=%ld C=%ld heads=%ld V=%ld layers=%d bias=%d\n", bf ? "bf16" : "fp32", long(B), long(T),
                long(C), long(NH), long(V), L, bias ? 1 : 0);
    std::printf("%-22s %6s %10s %10s %7s %9s\n", "op", "calls", "ms/call", "ms/step", "share", "TFLOP/s");
    for (const auto& r : rows)
      std::printf("%-22s %6d %10.3f %10.2f %6.1f%% %9.1f\n", r.name.c_str(), r.per_step, r.ms, r.ms * r.per_step,
                  100.0 * r.ms * r.per_step / total, r.flops > 0 ? r.flops / r.ms / 1e9 : 0.0);
    // The whole model, same shape: forward with targets, backward.
    model::GPTConfig cfg;
    cfg.n_layer = L;
    cfg.n_head = NH;
    cfg.n_embd = C;
    cfg.block_size = T;
    cfg.vocab_size = V;
    cfg.dropout = 0;
    cfg.bias = bias;
    model::GPT m(cfg, B, T, dev, {true, true, bf ? DType::BF16 : DType::F32});
    m.init_weights(1);
    std::vector<int32_t> tok(B * T);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 7919) % V);
    model::StepContext ctx;
    ctx.train = ctx.need_grad = true;
    const double step = time_ms([&] {
      m.forward(tok.data(), tok.data(), B, T, ctx);
      m.backward(tok.data(), B, T, ctx);
    });
    std::printf("sum of kernels %.2f ms; measured forward+backward %.2f ms (ratio %.2f); %.0f tokens/s\n", total, step,
                step / total, static_cast<double>(B * T) / step * 1e3);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gpu_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
