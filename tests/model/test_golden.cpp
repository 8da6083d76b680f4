// The C++ GPT against the PyTorch reference (tools/torch_ref): same initial
// weights, same batch -> logits, loss and every gradient; then 10 AdamW steps
// with gradient clipping -> the same losses and final weights. On the CPU and,
// where a GPU is present in a CUDA build, on the GPU in fp32 and in bf16 mixed
// precision (bf16 activations and compute weights, fp32 master weights and
// gradients); and in bf16 on the CPU (bf16 products, fp32 everything else,
// skipped without bf16 matrix hardware). bf16 is judged at bf16's resolution
// and without the final weights (Adam's normalized steps turn rounding noise
// into full steps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/gpu.h"
#include "golden.h"
#include "kernels/bf16.h"
#include "model/gpt.h"
#include "model/rope.h"
#include "optim/adamw.h"
#include "test_paths.h"

using namespace parallm;

namespace {

model::GPTConfig config_of(const nlohmann::json& c) {
  model::GPTConfig cfg;
  cfg.n_layer = c["n_layer"];
  cfg.n_head = c["n_head"];
  cfg.n_embd = c["n_embd"];
  cfg.block_size = c["block_size"];
  cfg.vocab_size = c["vocab_size"];
  cfg.dropout = 0.0f;
  if (!c.contains("arch")) {  // the GPT-2 cases
    cfg.bias = c["bias"];
    return cfg;
  }
  cfg.arch = model::parse_arch(c["arch"], "arch");
  cfg.n_kv_head = c["n_kv_head"];
  cfg.head_dim = c["head_dim"];
  cfg.intermediate_size = c["intermediate_size"];
  cfg.rope_theta = c["rope_theta"];
  cfg.rms_norm_eps = c["rms_norm_eps"];
  cfg.attention_bias = c["attention_bias"];
  cfg.tie_embeddings = c["tie_embeddings"];
  if (const auto& r = c["rope_scaling"]; !r.is_null()) {
    cfg.rope_scaling.kind = model::parse_rope_scaling(r["rope_type"], "rope_scaling");
    cfg.rope_scaling.factor = r["factor"];
    cfg.rope_scaling.low_freq_factor = r["low_freq_factor"];
    cfg.rope_scaling.high_freq_factor = r["high_freq_factor"];
    cfg.rope_scaling.original = r["original_max_position_embeddings"];
  }
  EXPECT_EQ(cfg.qk_norm(), c["qk_norm"].get<bool>());
  if (c.contains("moe")) {
    const auto& m = c["moe"];
    cfg.moe.experts = m["experts"];
    cfg.moe.top_k = m["top_k"];
    cfg.moe.intermediate = m["intermediate"];
    cfg.moe.shared = m["shared"];
    cfg.moe.score = m["score"] == "sigmoid" ? kernels::MoeScore::Sigmoid : kernels::MoeScore::Softmax;
    cfg.moe.norm_topk = m["norm_topk"];
    cfg.moe.routed_scale = m["routed_scale"];
    cfg.moe.aux_coef = m["aux_coef"];
    cfg.moe.z_coef = m["z_coef"];
    cfg.moe.first = m["first"];
    cfg.moe.every = m["every"];
    cfg.moe.bias = m["bias"];
  }
  return cfg;
}

void load_params(model::GPT& m, const test::Golden& g, const std::string& prefix) {
  std::vector<float> flat(m.flat_size(), 0.0f);
  for (const auto& s : m.layout().slots()) {
    const auto& v = g.f32.at(prefix + s.name);
    ASSERT_EQ(static_cast<int64_t>(v.size()), s.numel) << s.name;
    std::memcpy(flat.data() + s.offset, v.data(), v.size() * 4);
  }
  m.load_params(flat.data());
}

// max |got - want| relative to the tensor's largest reference magnitude.
double tensor_rel_err(const float* got, const std::vector<float>& want) {
  double mx = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::fabs(double(want[i])));
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
  }
  return mx > 0 ? err / mx : err;
}

class GoldenTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(GoldenTest, ForwardBackwardAndTenAdamWSteps) {
  const std::string where = std::get<1>(GetParam());
  const bool bf16 = where == "cuda_bf16" || where == "cpu_bf16";
  const Device dev = parse_device(where == "cuda_bf16" ? "cuda" : where == "cpu_bf16" ? "cpu" : where);
  if (!dev.is_cpu() && !gpu::available())
    GTEST_SKIP() << (gpu::built() ? "no GPU on this machine" : "CUDA not built") << ": GPU golden test skipped";
  if (where == "cpu_bf16" && !kernels::bf16_products_supported()) GTEST_SKIP() << "no bf16 matrix hardware on this CPU";
  test::Golden g(test::test_dir() + "/golden/" + std::get<0>(GetParam()));
  auto cfg = config_of(g.config);
  const int64_t B = g.config["batch_size"], T = g.config["seq_len"];
  model::GPT m(cfg, B, T, dev, {true, true, bf16 ? DType::BF16 : DType::F32});
  EXPECT_EQ(m.bf16_products(), where == "cpu_bf16");
  // Tolerances: loss, logits, gradients, training losses and norms (the
  // Llama family's fp32 bar is 1e-5 throughout, issue 46).
  const bool llama = cfg.llama();
  const double tl = bf16 ? 1e-2 : 1e-5, tlog = bf16 ? 3e-2 : 1e-5,
               tg = bf16    ? 5e-2
                    : llama ? 1e-5
                            : 1e-4,
               tt = bf16    ? 2e-2
                    : llama ? 1e-5
                            : 1e-4;
  load_params(m, g, "param/");

  // Forward + backward on (x, y).
  model::StepContext ctx;
  ctx.train = true;
  ctx.need_grad = true;
  m.zero_grad();
  float loss = m.forward(g.i32.at("x").data(), g.i32.at("y").data(), B, T, ctx);
  const float want_loss = g.f32.at("loss")[0];
  EXPECT_LE(std::fabs(loss - want_loss) / want_loss, tl) << "loss " << loss << " vs " << want_loss;
  if (cfg.moe.experts > 0) {  // the routing and the balancing terms' value
    const auto tally = m.take_moe_tally();
    const double aux = tally.aux + tally.z, want_aux = g.f32.at("aux_loss")[0];
    EXPECT_LE(std::fabs(aux - want_aux), (bf16 ? 1e-2 : 1e-5) * std::max(1e-3, want_aux)) << "aux " << aux;
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      if (!cfg.moe_layer(l) || bf16) continue;
      const auto ids = m.expert_choices(l);
      const auto& want = g.i32.at("route/" + std::to_string(l));
      EXPECT_EQ(ids, want) << "expert choices of layer " << l;
    }
  }
  std::vector<float> logits(B * T * cfg.vocab_size);
  m.all_logits(logits.data(), B, T);
  const double logits_err = tensor_rel_err(logits.data(), g.f32.at("logits"));
  EXPECT_LE(logits_err, tlog) << "logits";
  m.backward(g.i32.at("x").data(), B, T, ctx);
  std::vector<float> grads(m.flat_size());
  m.store_grads(grads.data());
  double grad_err = 0;
  for (const auto& s : m.layout().slots()) {
    double e = tensor_rel_err(grads.data() + s.offset, g.f32.at("grad/" + s.name));
    EXPECT_LE(e, tg) << "gradient of " << s.name;
    grad_err = std::max(grad_err, e);
  }
  std::printf("%s on %s: logits %.2e, worst gradient %.2e (of each tensor's max)\n", std::get<0>(GetParam()).c_str(),
              where.c_str(), logits_err, grad_err);

  // Ten AdamW steps with clipping, from the same initial weights.
  load_params(m, g, "param/");
  optim::AdamWConfig oc;
  oc.lr = g.config["lr"];
  oc.beta1 = g.config["beta1"];
  oc.beta2 = g.config["beta2"];
  oc.eps = g.config["eps"];
  oc.weight_decay = g.config["weight_decay"];
  optim::AdamW opt(m.layout(), oc, dev);
  const int steps = g.config["train_steps"];
  const auto& tx = g.i32.at("train_x");
  const auto& ty = g.i32.at("train_y");
  for (int k = 0; k < steps; ++k) {
    m.zero_grad();
    float l = m.forward(tx.data() + k * B * T, ty.data() + k * B * T, B, T, ctx);
    m.backward(tx.data() + k * B * T, B, T, ctx);
    const float want = g.f32.at("train_losses")[k];
    EXPECT_LE(std::fabs(l - want) / want, tt) << "step " << k << " loss " << l << " vs " << want;
    double norm = optim::global_norm(m.grads(), m.flat_size(), dev);
    EXPECT_NEAR(norm, g.f32.at("train_grad_norms")[k], tt * norm) << "grad norm at step " << k;
    opt.step(m.params(), m.grads(), oc.lr, optim::clip_factor(norm, g.config["grad_clip"]));
    m.params_changed();
  }
  if (bf16) return;
  double final_err = 0;
  std::vector<float> params(m.flat_size());
  m.store_params(params.data());
  for (const auto& s : m.layout().slots()) {
    std::vector<float> want = g.f32.at("train_final/" + s.name);
    std::vector<float> got(params.data() + s.offset, params.data() + s.offset + s.numel);
    if (s.name.find("c_attn.bias") != std::string::npos) {
      // The key bias gets an exactly-zero gradient (softmax is shift-invariant);
      // torch and we both hold rounding noise there, which Adam normalizes to
      // steps of +-lr. Those entries are checked apart, in absolute terms.
      const int64_t C = cfg.n_embd;
      for (int64_t i = C; i < 2 * C; ++i) {
        EXPECT_NEAR(got[i], want[i], 10 * oc.lr) << s.name << "[" << i << "]";
        got[i] = want[i] = 0.0f;
      }
    }
    // The Llama cases' final weights carry Adam-normalized fp32 noise of
    // their smallest first-step gradients (near eps): 1.3e-4 at worst against
    // a float64 replay of the reference (tests/golden/README.md).
    const double e = tensor_rel_err(got.data(), want);
    EXPECT_LE(e, llama ? 1e-3 : 1e-4) << "final weights of " << s.name;
    final_err = std::max(final_err, e);
  }
  std::printf("%s on %s: final weights after %d steps %.2e\n", std::get<0>(GetParam()).c_str(), where.c_str(), steps,
              final_err);
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest,
                         ::testing::Combine(::testing::Values("gpt_tiny_bias", "gpt_tiny_nobias", "llama_tiny_mqa",
                                                              "llama_tiny_gqa2_tied", "qwen3_tiny_kv4",
                                                              "qwen3_tiny_gqa2_tied", "llama_tiny_bias",
                                                              "moe_qwen3_top2_of8", "moe_mixtral_top1_of4",
                                                              "moe_top8_of16_shared", "moe_top2_of16_shared2"),
                                            ::testing::Values("cpu", "cpu_bf16", "cuda", "cuda_bf16")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

}  // namespace

// The host's rotary table against the reference's cos and sin (its fp32
// frequency arithmetic, with and without Llama 3's scaling).
TEST(GoldenRope, TableMatchesTheReferencesCosAndSin) {
  for (const char* name : {"llama_tiny_mqa", "llama_tiny_gqa2_tied", "qwen3_tiny_gqa2_tied", "llama_tiny_bias"}) {
    test::Golden g(test::test_dir() + "/golden/" + name);
    const model::GPTConfig cfg = config_of(g.config);
    const int64_t T = g.config["seq_len"], D = cfg.head_size(), h = D / 2;
    std::vector<int64_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = t;
    std::vector<float> table(static_cast<size_t>(T * D));
    model::rope_rows(table.data(), model::rope_inv_freq(cfg), pos.data(), T);
    const auto& cs = g.f32.at("rope_cos");
    const auto& sn = g.f32.at("rope_sin");
    double worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < h; ++i) {
        worst = std::max(worst, std::fabs(double(table[t * D + i]) - cs[t * h + i]));
        worst = std::max(worst, std::fabs(double(table[t * D + h + i]) - sn[t * h + i]));
      }
    EXPECT_LE(worst, 2e-7) << name;
    std::printf("%s: rotary table within %.1e of the reference\n", name, worst);
  }
}
