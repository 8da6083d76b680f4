// Model-level properties: nanoGPT's parameter count, init statistics,
// determinism, and input validation.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/gpu.h"
#include "kernels/bf16.h"
#include "model/gpt.h"
#include "optim/adamw.h"

using namespace parallm;

TEST(GPT, ParameterCountMatchesNanoGPT) {
  model::GPTConfig c;  // 6 layers, 6 heads, 384 embd, block 256, vocab 65, no bias
  model::GPT m(c, 1, 8);
  // nanoGPT prints "number of parameters: 10.65M" for this config.
  EXPECT_NEAR(m.num_params_nanogpt() / 1e6, 10.65, 0.005);
  EXPECT_EQ(m.num_params_nanogpt(), 10745088 - 256 * 384);
}

TEST(GPT, InitHasGpt2Statistics) {
  model::GPTConfig c;
  c.n_layer = 4;
  c.n_embd = 128;
  c.n_head = 4;
  c.block_size = 64;
  model::GPT m(c, 1, 8);
  m.init_weights(1337);
  auto stdev = [](const Tensor& t) {
    const float* p = t.data<float>();
    double s = 0;
    for (int64_t i = 0; i < t.numel(); ++i) s += double(p[i]) * p[i];
    return std::sqrt(s / t.numel());
  };
  EXPECT_NEAR(stdev(m.param("transformer.h.0.mlp.c_fc.weight")), 0.02, 0.001);
  EXPECT_NEAR(stdev(m.param("transformer.h.0.mlp.c_proj.weight")), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_EQ(m.param("transformer.h.1.ln_2.weight").data<float>()[5], 1.0f);
}

namespace {
// Two layers of 3 heads, 16 positions; a fixed batch of 2 x 16 tokens and targets.
model::GPTConfig tiny_config(float dropout) {
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_embd = 48;
  c.n_head = 3;
  c.block_size = 16;
  c.dropout = dropout;
  return c;
}
constexpr int64_t kB = 2, kT = 16;
void tiny_batch(std::vector<int32_t>& x, std::vector<int32_t>& y) {
  x.resize(kB * kT);
  y.resize(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    x[i] = (i * 13) % 65;
    y[i] = (i * 7 + 1) % 65;
  }
}
}  // namespace

TEST(GPT, ForwardBackwardIsBitwiseDeterministic) {
  const model::GPTConfig c = tiny_config(0.1f);
  const int64_t B = kB, T = kT;
  std::vector<int32_t> x, y;
  tiny_batch(x, y);
  std::vector<float> g1, g2;
  float l1 = 0, l2 = 0;
  for (int rep = 0; rep < 2; ++rep) {
    model::GPT m(c, B, T);
    m.init_weights(7);
    model::StepContext ctx{true, true, 99, 3, 1.0f, nullptr, 0};
    m.zero_grad();
    float l = m.forward(x.data(), y.data(), B, T, ctx);
    m.backward(x.data(), B, T, ctx);
    (rep == 0 ? l1 : l2) = l;
    (rep == 0 ? g1 : g2).assign(m.grads(), m.grads() + m.flat_size());
  }
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(g1, g2);
}

// An untied head (model.tie_embeddings=false) is a parameter of its own:
// lm_head.weight after ln_f, counted once more (V x C), its gradient and the
// token table's each the finite difference of the loss (the table's now only
// through the embedding).
TEST(GPT, AnUntiedHeadHasItsOwnWeightAndGradients) {
  model::GPTConfig c = tiny_config(0.0f);
  c.tie_embeddings = false;
  const int64_t B = kB, T = kT;
  std::vector<int32_t> x, y;
  tiny_batch(x, y);
  model::GPT m(c, B, T);
  model::GPTConfig tied = c;
  tied.tie_embeddings = true;
  EXPECT_EQ(m.layout().count(), model::ParamLayout(tied).count() + c.vocab_size * c.n_embd);
  EXPECT_EQ(static_cast<uint64_t>(m.layout().count()), c.num_params());
  const auto& head = m.layout().find("lm_head.weight");
  EXPECT_EQ(head.global_index, static_cast<int>(m.layout().slots().size()) - 1);
  m.init_weights(7);
  model::StepContext ctx{true, true, 99, 3, 1.0f, nullptr, 0};
  m.zero_grad();
  m.forward(x.data(), y.data(), B, T, ctx);
  m.backward(x.data(), B, T, ctx);
  const std::vector<float> g(m.grads(), m.grads() + m.flat_size());
  std::vector<float> p(m.params(), m.params() + m.flat_size());
  auto loss_at = [&](int64_t i, float v) {
    const float keep = p[static_cast<size_t>(i)];
    p[static_cast<size_t>(i)] = v;
    m.load_params(p.data());
    p[static_cast<size_t>(i)] = keep;
    return static_cast<double>(m.forward(x.data(), y.data(), B, T, model::StepContext{}));
  };
  const int64_t wte = m.layout().find("transformer.wte.weight").offset;
  for (int64_t i : {head.offset + 3, head.offset + 5 * c.n_embd + 1, head.offset + (c.vocab_size - 1) * c.n_embd,
                    wte + y[0] * c.n_embd + 2, wte + x[1] * c.n_embd + 4}) {
    const float v = p[static_cast<size_t>(i)], h = 1e-2f;
    const double fd = (loss_at(i, v + h) - loss_at(i, v - h)) / (2.0 * h);
    EXPECT_NEAR(g[static_cast<size_t>(i)], fd, 2e-4 + 2e-2 * std::fabs(fd)) << "flat offset " << i;
  }
  EXPECT_NE(g[static_cast<size_t>(head.offset + 3)], 0.0f);
}

// Activation recomputation trades compute for memory and nothing else: the
// same losses and gradients bit for bit (dropout on, two micro-steps
// accumulated, biases on), and full keeps at most a quarter of the
// activations at baby GPT.
TEST(GPT, RecomputeModesGiveTheSameBitsWithLessMemory) {
  model::GPTConfig c = tiny_config(0.1f);
  c.bias = true;
  std::vector<int32_t> x, y;
  tiny_batch(x, y);
  std::vector<float> losses[3], grads[3];
  const model::Recompute modes[] = {model::Recompute::None, model::Recompute::Selective, model::Recompute::Full};
  for (int i = 0; i < 3; ++i) {
    c.recompute = modes[i];
    model::GPT m(c, kB, kT);
    m.init_weights(7);
    m.zero_grad();
    for (uint64_t s = 0; s < 2; ++s) {
      model::StepContext ctx{true, true, 99, s, 0.5f, nullptr, 0};
      losses[i].push_back(m.forward(x.data(), y.data(), kB, kT, ctx));
      m.backward(x.data(), kB, kT, ctx);
    }
    grads[i].assign(m.grads(), m.grads() + m.flat_size());
  }
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(losses[i], losses[0]) << model::recompute_name(modes[i]);
    EXPECT_EQ(grads[i], grads[0]) << model::recompute_name(modes[i]);
  }
  model::GPTConfig baby;  // 6/6/384, block 256
  int64_t bytes[3];
  for (int i = 0; i < 3; ++i) {
    baby.recompute = modes[i];
    bytes[i] = model::GPT::buffers(baby, 8, 256, Device::cpu(), 1).activation_bytes;
  }
  EXPECT_LT(bytes[1], bytes[0]);
  EXPECT_LE(bytes[2], bytes[0] / 4) << "full: " << bytes[2] << " of " << bytes[0];
}

// docs/tensor_parallel.md gives the activation bytes of a training pass in
// closed form; the model's buffers (what the allocator then measures as
// activations) follow it within 5% at tp = 1, 2, 4, with and without sequence
// parallelism, for each recompute mode.
TEST(GPT, ActivationBytesFollowTheDocumentedFormula) {
  model::GPTConfig c;  // baby GPT with 12 heads so tp = 4 splits them
  c.n_head = 12;
  const double B = 8, T = 256, N = B * T, C = 384, h = 12, L = 6, V = 65;
  for (int t : {1, 2, 4})
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      for (auto rc : {model::Recompute::None, model::Recompute::Selective, model::Recompute::Full}) {
        c.recompute = rc;
        const double r = sp ? 1.0 / t : 1.0;  // the residual stream's share on a rank
        // Floats per layer kept (stored) and shared by all layers (recomputed), and the fp32 statistics.
        double kept = 0, shared = 0;
        if (rc == model::Recompute::None) kept = N * C * (4 * r + 12.0 / t);
        if (rc == model::Recompute::Selective) {
          kept = N * C * (2 * r + 8.0 / t);
          shared = N * C * (2 * r + 4.0 / t);
        }
        if (rc == model::Recompute::Full) {
          kept = N * C * r;
          shared = N * C * (3 * r + 12.0 / t);
        }
        const double stats = N * (4 * r + h / t);
        const double outside = N * C * 3 * r + N * (2 * r + 1) + (t > 1 ? N * (std::ceil(V / t) + 3) : 0);
        const double formula = 4 * (L * (kept + stats) + shared + outside);
        const double got =
            static_cast<double>(model::GPT::buffers(c, 8, 256, Device::cpu(), 1, DType::F32, t, sp).activation_bytes);
        EXPECT_NEAR(got, formula, 0.05 * formula)
            << "tp " << t << " sp " << sp << " recompute " << model::recompute_name(rc);
      }
    }
}

// On the GPU a forward may leave its loss for later (the trainer reads it
// while the backward runs): the same value, read once, and not lost to the
// next forward by accident.
TEST(GPT, GpuDeferredLossEqualsTheImmediateOne) {
  if (!gpu::available()) GTEST_SKIP() << (gpu::built() ? "no GPU on this machine" : "CUDA not built");
  const model::GPTConfig c = tiny_config(0.0f);
  const int64_t B = kB, T = kT;
  std::vector<int32_t> x, y;
  tiny_batch(x, y);
  for (DType dt : {DType::F32, DType::BF16}) {
    model::GPT m(c, B, T, parse_device("cuda"), {true, true, dt});
    m.init_weights(7);
    model::StepContext ctx{true, true, 99, 3, 1.0f, nullptr, 0};
    const float now = m.forward(x.data(), y.data(), B, T, ctx);
    ctx.defer_loss = true;
    EXPECT_TRUE(std::isnan(m.forward(x.data(), y.data(), B, T, ctx)));
    m.backward(x.data(), B, T, ctx);
    EXPECT_EQ(m.deferred_loss(), now);
    EXPECT_THROW(m.deferred_loss(), InternalError);  // read once
    m.forward(x.data(), y.data(), B, T, ctx);
    EXPECT_THROW(m.forward(x.data(), y.data(), B, T, ctx), InternalError);  // the first was never read
  }
}

TEST(GPT, RejectsBadConfigAndTokens) {
  model::GPTConfig c;
  c.n_embd = 100;
  c.n_head = 3;
  EXPECT_THROW(model::GPT(c, 1, 8), ConfigError);
  model::GPTConfig ok;
  ok.n_layer = 1;
  ok.n_embd = 12;
  ok.n_head = 2;
  ok.block_size = 8;
  EXPECT_THROW(model::GPT(ok, 1, 9), ConfigError);  // longer than block_size
  // bf16 on the CPU runs bf16 products with fp32 buffers where the CPU has the
  // hardware, and is refused otherwise; integer types are not compute types.
  if (kernels::bf16_products_supported()) {
    model::GPT b(ok, 1, 4, Device::cpu(), {true, true, DType::BF16});
    EXPECT_TRUE(b.bf16_products());
    EXPECT_EQ(b.compute_dtype(), DType::F32);
  } else {
    EXPECT_THROW(model::GPT(ok, 1, 4, Device::cpu(), {true, true, DType::BF16}), ConfigError);
  }
  EXPECT_THROW(model::GPT(ok, 1, 4, Device::cpu(), {true, true, DType::I32}), ConfigError);
  model::GPT m(ok, 1, 4);
  std::vector<int32_t> x{1, 2, 65, 3};
  EXPECT_THROW(m.forward(x.data(), nullptr, 1, 4, {}), ShapeError);
}

TEST(GPT, CpuBf16WeightCopyFollowsEveryParameterChange) {
  if (!kernels::bf16_products_supported()) GTEST_SKIP() << "no bf16 matrix hardware on this CPU";
  // The products read a bf16 copy of the parameters, redrawn after
  // params_changed(): a model whose parameters were replaced must give
  // bitwise what a fresh model with those parameters gives.
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_embd = 48;
  c.n_head = 3;
  c.block_size = 16;
  c.bias = true;
  const int64_t B = 2, T = 16;
  std::vector<int32_t> x(B * T), y(B * T);
  for (int i = 0; i < B * T; ++i) {
    x[i] = (i * 11) % 65;
    y[i] = (i * 5 + 2) % 65;
  }
  const model::GPTStorage bf16{true, true, DType::BF16};
  model::StepContext ctx;
  ctx.need_grad = true;
  auto step = [&](model::GPT& m, std::vector<float>& grads, std::vector<float>& logits) {
    m.zero_grad();
    const float l = m.forward(x.data(), y.data(), B, T, ctx);
    m.backward(x.data(), B, T, ctx);
    grads.assign(m.grads(), m.grads() + m.flat_size());
    logits.resize(B * 65);
    m.last_logits(logits.data(), B, T);
    return l;
  };
  model::GPT a(c, B, T, Device::cpu(), bf16), b(c, B, T, Device::cpu(), bf16);
  a.init_weights(1);
  b.init_weights(2);
  std::vector<float> ga, gb, la, lb, p2(a.flat_size());
  const float l1 = step(a, ga, la);
  b.store_params(p2.data());
  a.load_params(p2.data());
  const float l2 = step(a, ga, la);
  EXPECT_NE(l1, l2);
  EXPECT_EQ(l2, step(b, gb, lb));
  EXPECT_EQ(ga, gb);
  EXPECT_EQ(la, lb);
  // Written in place (as the optimizer does), then announced.
  for (int64_t i = 0; i < a.flat_size(); ++i) a.params()[i] *= 0.5f;
  a.params_changed();
  for (int64_t i = 0; i < b.flat_size(); ++i) p2[i] *= 0.5f;
  b.load_params(p2.data());
  EXPECT_EQ(step(a, ga, la), step(b, gb, lb));
  EXPECT_EQ(ga, gb);
  // AdamW writing the copy as it updates the weights keeps it current: the
  // same trajectory, bitwise, as redrawing it after every step.
  optim::AdamW oa(a.layout(), {}), ob(b.layout(), {});
  for (int s = 0; s < 3; ++s) {
    bfloat16* copy = a.weight_copy_for_step();
    ASSERT_NE(copy, nullptr);
    oa.step(a.params(), a.grads(), 1e-2f, 0.9f, copy);
    ob.step(b.params(), b.grads(), 1e-2f, 0.9f);
    b.params_changed();
    EXPECT_EQ(b.weight_copy_for_step(), nullptr) << "a stale copy is not offered";
    EXPECT_EQ(step(a, ga, la), step(b, gb, lb)) << "step " << s;
    EXPECT_EQ(ga, gb);
    EXPECT_EQ(la, lb);
  }
  model::GPT f(c, B, T);  // fp32: no copy
  EXPECT_EQ(f.weight_copy_for_step(), nullptr);
}

// The Llama family's closed-form parameter count (what `parallm plan` and the
// MFU count read) equals its layout's, for every variant of its keys, and the
// FLOPs per token count the attention width and SwiGLU's three matrices.
TEST(GPT, TheLlamaFamilysCountsEqualItsLayout) {
  for (auto arch : {model::Arch::Llama, model::Arch::Qwen3})
    for (bool tie : {true, false})
      for (bool bias : {false, true})
        for (int64_t kv : {1, 2, 6}) {
          model::GPTConfig c;
          c.arch = arch;
          c.n_layer = 3;
          c.n_head = 6;
          c.n_kv_head = kv;
          c.n_embd = 40;
          c.head_dim = 10;
          c.intermediate_size = 72;
          c.vocab_size = 61;
          c.tie_embeddings = tie;
          c.attention_bias = bias;
          c.validate();
          EXPECT_EQ(static_cast<uint64_t>(model::ParamLayout(c).count()), c.num_params())
              << model::arch_name(arch) << " tie " << tie << " bias " << bias << " kv " << kv;
        }
  model::GPTConfig c;
  c.arch = model::Arch::Llama;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.head_dim = 16;  // attention 64 wide, twice n_embd
  c.intermediate_size = 96;
  c.block_size = 8;
  c.vocab_size = 50;
  model::GPT m(c, 1, 8);
  // q 32x64, k and v 32x32 each, o 64x32, gate/up/down 3 x 32x96, two norms; the table; the final norm (no wpe).
  const int64_t per_layer = 32 * 64 + 2 * 32 * 32 + 64 * 32 + 3 * 32 * 96 + 2 * 32;
  EXPECT_EQ(m.num_params_nanogpt(), 2 * per_layer + 50 * 32 + 32);
  EXPECT_DOUBLE_EQ(m.flops_per_token(8), 6.0 * static_cast<double>(m.num_params_nanogpt()) + 12.0 * 2 * 64 * 8);
}

// An MoE model's closed-form count (num_params) is the layout's, at every tp
// split of its experts; the active count leaves out the experts a token does not use.
TEST(MoeCounts, ClosedFormMatchesTheLayoutAndActiveLeavesOutIdleExperts) {
  for (int64_t shared : {0, 2})
    for (bool bias : {false, true})
      for (int64_t first : {0, 1}) {
        model::GPTConfig c;
        c.arch = model::Arch::Llama;
        c.n_layer = 4;
        c.n_head = 4;
        c.n_kv_head = 2;
        c.n_embd = 32;
        c.head_dim = 8;
        c.intermediate_size = 48;
        c.vocab_size = 61;
        c.moe = {
            .experts = 6, .top_k = 2, .intermediate = 20, .shared = shared, .first = first, .every = 2, .bias = bias};
        c.validate();
        EXPECT_EQ(static_cast<uint64_t>(model::ParamLayout(c).count()), c.num_params());
        const uint64_t idle = static_cast<uint64_t>(c.moe_layers() * (6 - 2) * 3 * 32 * 20);
        EXPECT_EQ(c.active_params(), c.num_params() - idle);
        EXPECT_EQ(c.moe_layers(), 2);  // every 2nd of 4 from `first`: layers 0, 2 or 1, 3
        uint64_t parts = 0;
        for (int r = 0; r < 2; ++r) parts += static_cast<uint64_t>(model::ParamLayout(c, {2, r}).count());
        // The replicated slots (norms, router, bias) twice, the split ones once.
        uint64_t replicated = static_cast<uint64_t>(c.n_layer * 2 * 32 + 32);
        replicated += static_cast<uint64_t>(c.moe_layers() * (6 * 32 + (bias ? 6 : 0)));
        EXPECT_EQ(parts, c.num_params() + replicated);
      }
}

// Bad MoE configurations: each refused naming its key.
TEST(MoeCounts, BadConfigsNameTheirKey) {
  auto refused = [](auto edit, const char* key) {
    model::GPTConfig c;
    c.arch = model::Arch::Llama;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    c.moe.experts = 4;
    edit(c);
    try {
      c.validate();
      model::block_widths(c, 2);
      ADD_FAILURE() << key << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  refused([](model::GPTConfig& c) { c.moe.top_k = 5; }, "model.moe_top_k");
  refused([](model::GPTConfig& c) { c.moe.experts = 2000; }, "model.moe_experts");
  refused([](model::GPTConfig& c) { c.arch = model::Arch::Gpt2; }, "model.moe_experts");
  refused([](model::GPTConfig& c) { c.moe.first = 2; }, "model.moe_first_layer");
  refused([](model::GPTConfig& c) { c.moe.shared = 5; }, "model.moe_shared_experts");
  refused([](model::GPTConfig& c) { c.moe.intermediate = 21; }, "model.moe_intermediate_size");
  refused([](model::GPTConfig& c) { c.moe.capacity = -1; }, "model.moe_capacity_factor");
}

namespace {
// A two-layer Llama of 32 channels (4 heads in 2 KV groups, SwiGLU 48, vocabulary 50) with `moe`.
model::GPTConfig tiny_moe(int64_t block_size, model::MoeConfig moe) {
  model::GPTConfig c;
  c.arch = model::Arch::Llama;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.intermediate_size = 48;
  c.block_size = block_size;
  c.vocab_size = 50;
  c.moe = moe;
  return c;
}
}  // namespace

// DeepSeek's auxiliary-loss-free balancing: after a training pass, each expert's selection bias moves by the
// rate, up for an expert below its layer's mean load and down above it (expert 0, chosen by every token through
// a large bias, goes down; the dense layer 0 has none); nothing moves without the rate.
TEST(MoeBiasUpdate, TheBiasMovesTowardBalanceByTheRate) {
  model::GPTConfig c =
      tiny_moe(8, {.experts = 4, .top_k = 1, .intermediate = 16, .first = 1, .bias = true, .bias_rate = 0.01});
  c.validate();
  model::GPT m(c, 2, 8);
  m.init_weights(3);
  float* b = m.param("model.layers.1.mlp.gate.e_score_correction_bias").data<float>();
  b[0] = 100.0f;  // every token's choice: expert 0 (load 16, the others 0; mean 4)
  m.params_changed();
  std::vector<int32_t> x(16), y(16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = y[i] = static_cast<int32_t>(i * 3 % 50);
  model::StepContext ctx;
  ctx.train = ctx.need_grad = true;
  m.forward(x.data(), y.data(), 2, 8, ctx);
  m.balance_expert_bias();
  EXPECT_FLOAT_EQ(b[0], 100.0f - 0.01f);
  for (int e = 1; e < 4; ++e) EXPECT_FLOAT_EQ(b[e], 0.01f) << e;
  const auto t = m.take_moe_tally();
  EXPECT_EQ(t.tokens[4], 16);  // layer 1's expert 0: every token
  m.balance_expert_bias();     // the tally was taken: nothing counted, nothing moves
  EXPECT_FLOAT_EQ(b[0], 100.0f - 0.01f);
  model::GPTConfig no_bias = c;
  no_bias.moe.bias = false;
  EXPECT_THROW(no_bias.validate(), ConfigError);  // the rate needs the bias
}

// The capacity factor's drop rule: a selection bias makes expert 0 every token's first choice, so with
// capacity c each sequence of T keeps ceil(c T K / E) of expert 0's T choices, in position order, and drops the
// rest; an evaluation pass (not training) drops nothing; and a capacity that fits every choice changes no bit.
TEST(MoeCapacity, EachSequenceKeepsTheFirstChoicesUpToTheCapacity) {
  model::GPTConfig c = tiny_moe(12, {.experts = 4, .top_k = 2, .intermediate = 16, .first = 1, .bias = true});
  const int64_t B = 3, T = 12;
  std::vector<int32_t> x(B * T), y(B * T);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>((i * 7 + 3) % 50);
    y[i] = static_cast<int32_t>((i * 5 + 1) % 50);
  }
  auto losses = [&](double capacity, bool train, double* dropped) {
    c.moe.capacity = capacity;
    model::GPT m(c, B, T);
    m.init_weights(7);
    m.param("model.layers.1.mlp.gate.e_score_correction_bias").data<float>()[0] = 1e4f;
    m.params_changed();
    model::StepContext ctx;
    ctx.train = ctx.need_grad = train;
    const float loss = m.forward(x.data(), y.data(), B, T, ctx);
    *dropped = m.take_moe_tally().dropped;
    return loss;
  };
  double dropped = 0;
  const float dropless = losses(0, true, &dropped);
  EXPECT_EQ(dropped, 0);
  // capacity 1: ceil(1 x 12 x 2 / 4) = 6 of expert 0's 12 choices per sequence kept; the second choices spread
  // over experts 1-3 (12 choices, at most 6 each: none dropped there when they are spread, so count exactly).
  const float one = losses(1.0, true, &dropped);
  EXPECT_GE(dropped, B * (T - 6));
  EXPECT_NE(one, dropless);
  losses(0.5, true, &dropped);  // 3 of each sequence's expert-0 choices
  EXPECT_GE(dropped, B * (T - 3));
  EXPECT_EQ(losses(2.0, false, &dropped), losses(0, false, &dropped));  // evaluation: dropless
  EXPECT_EQ(losses(4.0, true, &dropped), dropless);                     // ceil(4 x 24 / 4) = 24 >= T: nothing to drop
  EXPECT_EQ(dropped, 0);
}
