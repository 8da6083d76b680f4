// CUDA graphs of the training passes (model/pass_graphs.h, train.cuda_graphs).
// Everywhere: a pass runs exactly once per call whatever happens to its
// capture (here without a GPU the capture fails, is said, and every pass runs
// eagerly), and a model on the CPU says why it cannot use graphs. With a GPU:
// training steps whose passes run from graphs give the eager steps' losses
// and gradients bit for bit (GPT-2 fp32 and bf16; Llama bf16 with full
// recompute, the rope table and a backward that reuses the forward's last
// block), with the batch changing every micro-step and the weights every
// step; and the caching allocator never hands a block a graph may write to
// anyone else while the graph lives. Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/gpu.h"
#include "kernels/cuda_test_util.h"
#include "model/gpt.h"
#include "model/pass_graphs.h"

namespace parallm {
namespace {

TEST(PassGraphs, EveryCallRunsItsPassOnceWhateverTheCaptureDoes) {
  model::PassGraphs g;
  int runs = 0;
  const model::PassGraphs::Key key{0, 0, 0, 2, 7, 1.0f, 0};
  gpu::DeviceBuffer buf;
  if (gpu::available()) buf = gpu::DeviceBuffer(256, MemCategory::Scratch);
  for (int i = 0; i < 4; ++i)
    g.run(key, [&] {
      ++runs;
      if (buf.data()) gpu::memset_zero(buf.data(), buf.bytes());  // the pass's device work: one node
    });
  if (gpu::available()) {  // run eagerly, then captured (the host code runs once more) and launched, then launched
    EXPECT_EQ(runs, 2);
    EXPECT_EQ(g.launches(), 3);
    EXPECT_EQ(g.failure(), "");
  } else {  // the capture fails and says why; the passes run eagerly from then on
    EXPECT_EQ(runs, 4);
    EXPECT_EQ(g.launches(), 0);
    EXPECT_NE(g.failure(), "");
  }
}

TEST(PassGraphs, AModelOnTheCpuSaysWhyItRunsEagerly) {
  model::GPTConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 53;
  model::GPT m(c, 2, 8);
  EXPECT_EQ(m.use_cuda_graphs(), "the model runs on the CPU");
  EXPECT_EQ(m.graph_summary(), "");
}

class CudaGraphs : public test::Cuda {};

model::GPTConfig odd_gpt() {
  model::GPTConfig c;
  c.n_layer = 3;
  c.n_head = 3;
  c.n_embd = 48;
  c.block_size = 16;
  c.vocab_size = 53;  // no power of two
  return c;
}

model::GPTConfig odd_llama() {
  model::GPTConfig c = odd_gpt();
  c.arch = model::Arch::Llama;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.recompute = model::Recompute::Full;
  return c;
}

struct Trace {
  std::vector<float> losses, grads;
  std::string summary;
};

// Three steps of two micro-batches (each its own tokens), the weights moved after each step from the host.
Trace train(const model::GPTConfig& c, DType compute, bool graphs) {
  constexpr int64_t B = 3, T = 13, kSteps = 3, kGas = 2;
  model::GPT m(c, B, T, Device::cuda(), {true, true, compute});
  m.init_weights(11);
  if (graphs) {
    EXPECT_EQ(m.use_cuda_graphs(), "");
  }
  Trace out;
  std::vector<int32_t> x(B * T), y(B * T);
  std::vector<float> p(static_cast<size_t>(m.flat_size())), g(p.size());
  for (int64_t it = 0; it < kSteps; ++it) {
    m.zero_grad();
    for (int64_t micro = 0; micro < kGas; ++micro) {
      for (int64_t i = 0; i < B * T; ++i) {
        x[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + it * 5 + micro * 3) % c.vocab_size);
        y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 11 + it + micro) % c.vocab_size);
      }
      model::StepContext ctx{true, true, 5, static_cast<uint64_t>(it * kGas + micro), 0.5f, nullptr, 0};
      ctx.graphs = true;  // only a model told use_cuda_graphs() takes it up
      out.losses.push_back(m.forward(x.data(), y.data(), B, T, ctx));
      m.backward(x.data(), B, T, ctx);
    }
    m.store_grads(g.data());
    out.grads.insert(out.grads.end(), g.begin(), g.end());
    m.store_params(p.data());
    for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.05f * g[i];
    m.load_params(p.data());  // the bf16 copy is stale: redrawn before the next graph reads it
  }
  out.summary = m.graph_summary();
  return out;
}

void expect_bitwise(const model::GPTConfig& c, DType compute, const char* what) {
  const Trace eager = train(c, compute, false), graphs = train(c, compute, true);
  EXPECT_EQ(eager.losses, graphs.losses) << what;
  EXPECT_TRUE(eager.grads == graphs.grads) << what << ": gradients differ";
  for (float l : graphs.losses) EXPECT_TRUE(std::isfinite(l)) << what;
  // Two keys (forward, backward): each run eagerly once, then 5 passes each from their graphs.
  EXPECT_EQ(graphs.summary, "CUDA graphs: 10 passes ran from 2 captured graphs") << what;
}

TEST_F(CudaGraphs, TrainingStepsFromGraphsEqualEagerStepsBitForBit) {
  expect_bitwise(odd_gpt(), DType::F32, "gpt2 fp32");
  expect_bitwise(odd_gpt(), DType::BF16, "gpt2 bf16");
  expect_bitwise(odd_llama(), DType::BF16, "llama bf16, full recompute");
}

TEST_F(CudaGraphs, ModelsThatCannotBeCapturedSayWhy) {
  model::GPTConfig c = odd_gpt();
  c.dropout = 0.1f;
  model::GPT m(c, 2, 8, Device::cuda());
  EXPECT_NE(m.use_cuda_graphs().find("model.dropout=0.1"), std::string::npos);
}

TEST_F(CudaGraphs, TheAllocatorKeepsAGraphsBlocksFromOtherCallers) {
  constexpr size_t kBytes = 3 << 20;
  void* before = gpu::device_alloc(kBytes, MemCategory::Scratch);  // existed when the capture ended
  void* inside = nullptr;
  {
    gpu::Graph g;
    ASSERT_EQ(g.capture([&] {
      inside = gpu::device_alloc(kBytes, MemCategory::Scratch);
      gpu::memset_zero(inside, kBytes);
      gpu::memset_zero(before, kBytes);
      gpu::device_free(inside, kBytes, MemCategory::Scratch);
    }),
              "");
    gpu::device_free(before, kBytes, MemCategory::Scratch);
    void* a = gpu::device_alloc(kBytes, MemCategory::Scratch);
    void* b = gpu::device_alloc(kBytes, MemCategory::Scratch);
    EXPECT_NE(a, inside);  // the graph writes there at every launch
    EXPECT_NE(a, before);
    EXPECT_NE(b, inside);
    EXPECT_NE(b, before);
    g.launch();
    gpu::synchronize();
    gpu::device_free(a, kBytes, MemCategory::Scratch);
    gpu::device_free(b, kBytes, MemCategory::Scratch);
  }
  // The graph is gone: its blocks are everyone's again.
  void* c = gpu::device_alloc(kBytes, MemCategory::Scratch);
  void* d = gpu::device_alloc(kBytes, MemCategory::Scratch);
  void* e = gpu::device_alloc(kBytes, MemCategory::Scratch);
  void* f = gpu::device_alloc(kBytes, MemCategory::Scratch);
  const std::vector<void*> got{c, d, e, f};
  EXPECT_NE(std::find(got.begin(), got.end(), inside), got.end());
  EXPECT_NE(std::find(got.begin(), got.end(), before), got.end());
  for (void* q : got) gpu::device_free(q, kBytes, MemCategory::Scratch);
}

TEST_F(CudaGraphs, AFailedCaptureSaysWhyAndTheStreamRunsOn) {
  test::Dev<float> buf(std::vector<float>(64, 1.0f));
  gpu::Graph g;
  const std::string why = g.capture([&] {
    gpu::memset_zero(buf.p(), 64 * sizeof(float));
    gpu::synchronize();  // a host wait inside a capture
  });
  EXPECT_NE(why, "");
  EXPECT_FALSE(g.ready());
  EXPECT_EQ(buf.back(), std::vector<float>(64, 1.0f));  // nothing of it ran
  gpu::memset_zero(buf.p(), 64 * sizeof(float));
  EXPECT_EQ(buf.back(), std::vector<float>(64, 0.0f));
}

}  // namespace
}  // namespace parallm
