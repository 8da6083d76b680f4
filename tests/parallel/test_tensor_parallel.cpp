// Tensor parallelism at the model level, under mpirun: the whole world is one
// tp group, and every rank also runs the one-rank model itself, so each rank
// compares its part with the whole. Dropout on, a vocabulary (65) the degrees
// do not divide, biases on and off, two micro-steps accumulated.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gpt.h"
#include "parallel/dist_run.h"
#include "parallel/tensor_parallel.h"
#include "parallel/whole_model.h"
#include "train/checkpoint/checkpoint.h"

using namespace parallm;
using test_util::world;

namespace {

model::GPTConfig config(bool bias) {
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 12;  // divisible by 1, 2, 3, 4, 6
  c.n_embd = 48;
  c.block_size = 16;
  c.vocab_size = 65;
  c.dropout = 0.1f;
  c.bias = bias;
  return c;
}

constexpr int64_t kB = 3, kT = 16;

void batch(int step, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  x.resize(kB * kT);
  y.resize(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    x[i] = (i * 13 + step * 5) % 65;
    y[i] = (i * 7 + 1 + step) % 65;
  }
}

// Two micro-steps of training (dropout on, gradients accumulated); the losses.
std::vector<float> train_two(model::GPT& m) {
  std::vector<float> losses;
  m.zero_grad();
  for (int s = 0; s < 2; ++s) {
    std::vector<int32_t> x, y;
    batch(s, x, y);
    model::StepContext ctx;
    ctx.train = ctx.need_grad = true;
    ctx.seed = 7;
    ctx.micro_step = static_cast<uint64_t>(s);
    ctx.loss_scale = 0.5f;
    losses.push_back(m.forward(x.data(), y.data(), kB, kT, ctx));
    m.backward(x.data(), kB, kT, ctx);
  }
  return losses;
}

// Slot s of a sharded model's flat buffer, gathered to its global shape.
std::vector<float> gathered(const model::ParamLayout& layout, const float* flat, int s) {
  const auto& slot = layout.slots()[s];
  std::vector<float> whole(static_cast<size_t>(shape_numel(slot.global_shape)), 0.0f);
  layout.place(s, flat + slot.offset, whole.data());
  if (!slot.placement.sharded()) return whole;
  // Each element is written by exactly one rank: the sum is the gather.
  world->all_reduce(Tensor::view_of(whole.data(), {static_cast<int64_t>(whole.size())}, DType::F32));
  return whole;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

void expect_tp_matches_one_rank(bool bias, bool sp = false, model::Recompute rc = model::Recompute::None) {
  auto cfg = config(bias);
  cfg.recompute = rc;
  parallel::TensorParallelGroup tp(*world, Device::cpu());
  model::GPT whole(cfg, kB, kT), part(cfg, kB, kT, Device::cpu(), {}, &tp, sp);
  whole.init_weights(1337);
  part.init_weights(1337);
  const auto& L = part.layout();
  // Init: every rank's part is the one-rank weights' slice.
  for (int s = 0; s < static_cast<int>(L.slots().size()); ++s) {
    const auto got = gathered(L, part.params(), s);
    const auto& ref = whole.layout().slots()[s];
    ASSERT_TRUE(std::equal(got.begin(), got.end(), whole.params() + ref.offset)) << L.slots()[s].name;
  }
  const auto lw = train_two(whole), lp = train_two(part);
  for (size_t i = 0; i < lw.size(); ++i) EXPECT_NEAR(lp[i], lw[i], 1e-6 * std::fabs(lw[i])) << "micro-step " << i;
  // Gradients: every tensor within 1e-5 of its max-abs value.
  for (int s = 0; s < static_cast<int>(L.slots().size()); ++s) {
    const auto got = gathered(L, part.grads(), s);
    const auto& ref = whole.layout().slots()[s];
    const std::vector<float> want(whole.grads() + ref.offset, whole.grads() + ref.offset + ref.numel);
    const double tol = 1e-5 * std::max(max_abs(want), 1e-12);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    EXPECT_LE(worst, tol) << L.slots()[s].name << " at tp=" << world->size();
  }
  // Replicated parameters (LayerNorms, the row-parallel biases, wpe) get the
  // same gradient bits on every rank of the group, so the replicas never drift.
  for (int s = 0; s < static_cast<int>(L.slots().size()); ++s) {
    const auto& slot = L.slots()[s];
    if (slot.placement.sharded()) continue;
    std::vector<float> first(part.grads() + slot.offset, part.grads() + slot.offset + slot.numel);
    world->broadcast(Tensor::view_of(first.data(), {slot.numel}, DType::F32), 0);
    EXPECT_TRUE(std::equal(first.begin(), first.end(), part.grads() + slot.offset)) << slot.name << " differs";
  }
  // The padded rows of the token table never receive gradient.
  const auto vr = L.vocab_rows();
  const float* dwte = part.grads() + L.wte();
  for (int64_t i = vr.valid * cfg.n_embd; i < vr.rows * cfg.n_embd; ++i) ASSERT_EQ(dwte[i], 0.0f) << "padded row";
  // Logits for sampling: the whole vocabulary, gathered.
  std::vector<int32_t> x, y;
  batch(0, x, y);
  model::StepContext eval;
  whole.forward(x.data(), nullptr, kB, kT, eval);
  part.forward(x.data(), nullptr, kB, kT, eval);
  std::vector<float> a(kB * cfg.vocab_size), b(kB * cfg.vocab_size);
  whole.last_logits(a.data(), kB, kT);
  part.last_logits(b.data(), kB, kT);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * (1 + std::fabs(a[i])));
}

}  // namespace

TEST(TensorParallel, ModelMatchesOneRankWithBias) {
  expect_tp_matches_one_rank(true);
}

TEST(TensorParallel, ModelMatchesOneRankWithoutBias) {
  expect_tp_matches_one_rank(false);
}

TEST(TensorParallel, SequenceParallelMatchesOneRankWithBias) {
  expect_tp_matches_one_rank(true, true);
}

TEST(TensorParallel, SequenceParallelMatchesOneRankWithoutBias) {
  expect_tp_matches_one_rank(false, true);
}

TEST(TensorParallel, RecomputeWithSequenceParallelMatchesOneRank) {
  expect_tp_matches_one_rank(true, true, model::Recompute::Selective);
  expect_tp_matches_one_rank(true, true, model::Recompute::Full);
}

TEST(TensorParallel, SequenceParallelNeedsTokensTheDegreeDivides) {
  if (world->size() == 1) GTEST_SKIP() << "one rank divides everything";
  parallel::TensorParallelGroup tp(*world, Device::cpu());
  model::GPT m(config(false), kB, kT, Device::cpu(), {}, &tp, true);
  m.init_weights(1);
  std::vector<int32_t> x(kT + 1, 1);
  try {
    m.forward(x.data(), nullptr, 1, world->size() + 1, {});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("sequence parallelism splits the batch's"), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, HeadsNotDivisibleIsAnError) {
  if (world->size() == 1) GTEST_SKIP() << "one rank divides everything";
  auto cfg = config(false);
  cfg.n_head = world->size() + 1;
  cfg.n_embd = 4 * cfg.n_head;
  parallel::TensorParallelGroup tp(*world, Device::cpu());
  try {
    model::GPT m(cfg, kB, kT, Device::cpu(), {}, &tp);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is not divisible by parallel.tp"), std::string::npos) << e.what();
  }
}

// The whole model's groups assembled from the parts (gather_whole_group),
// and a part read back from a whole checkpoint range by range
// (read_checkpoint_part), both against slice_whole of the whole buffers; the
// checkpoint in both forms: format 3 (one file per part) and format 4 written
// group by group by every rank (write_checkpoint with assembled_groups).
using TpCheckpoint = test_util::DistRunTest;

TEST_F(TpCheckpoint, WholeGroupsGatherAndPartsReadBack) {
  const int n = world->size(), me = world->rank();
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    const model::ParamLayout whole(config(bias)), part(config(bias), {n, me});
    // Whole buffers whose every real element is its own offset (m: + 0.25, v: negated); padding zero.
    std::vector<float> w[3];
    for (auto& b : w) b.assign(static_cast<size_t>(whole.total()), 0.0f);
    for (const auto& slot : whole.slots())
      for (int64_t i = slot.offset; i < slot.offset + slot.numel; ++i) {
        w[0][i] = static_cast<float>(i);
        w[1][i] = static_cast<float>(i) + 0.25f;
        w[2][i] = -static_cast<float>(i);
      }
    std::vector<float> mine[3];
    for (int k = 0; k < 3; ++k) {
      mine[k].assign(static_cast<size_t>(part.total()), 0.0f);
      parallel::slice_whole(part, whole, w[k].data(), mine[k].data());
    }
    for (int g = 0; g < whole.num_groups(); ++g) {
      std::vector<float> out(me == 0 ? static_cast<size_t>(whole.group(g).end - whole.group(g).begin) : 0, -1.0f);
      parallel::gather_whole_group(*world, part, whole, g, mine[0].data() + part.group(g).begin,
                                   me == 0 ? out.data() : nullptr);
      if (me == 0) {
        EXPECT_TRUE(std::equal(out.begin(), out.end(), w[0].begin() + whole.group(g).begin)) << "group " << g;
      }
    }
    const std::string single = (root_ / ("single" + std::to_string(me))).string(),
                      grouped = (root_ / (bias ? "grouped_bias" : "grouped")).string();
    train::save_checkpoint(single, whole, w[0].data(), w[1].data(), w[2].data(), 3, {}, nlohmann::json::object());
    // Every rank writes the groups g % n == rank.
    train::write_checkpoint(*world, grouped, whole,
                            parallel::assembled_groups(me, n, whole,
                                                       [&](train::CkptPart k, int g, float* out) {
                                                         if (!out) return;
                                                         const auto& src = w[static_cast<int>(k)];
                                                         std::copy(src.begin() + whole.group(g).begin,
                                                                   src.begin() + whole.group(g).end, out);
                                                       }),
                            3, {}, nlohmann::json::object());
    for (const std::string& dir : {single, grouped}) {
      const auto meta = train::read_checkpoint_meta(dir);
      train::verify_checkpoint(meta);
      train::check_checkpoint_layout(meta, whole);
      EXPECT_EQ(meta["format"], dir == single ? 3 : 4);
      // The whole part, and ranges cut anywhere (inside rows, slots and groups).
      std::vector<std::pair<int64_t, int64_t>> ranges = {{0, part.total()}};
      for (int64_t b = 0; b < part.total(); b += 997) ranges.push_back({b, std::min<int64_t>(1301, part.total() - b)});
      for (int k = 0; k < 3; ++k)
        for (const auto& [b, c] : ranges) {
          std::vector<float> got(static_cast<size_t>(c), -7.0f);
          train::read_checkpoint_part(meta, static_cast<train::CkptPart>(k), part, whole, b, c, got.data());
          ASSERT_TRUE(std::equal(got.begin(), got.end(), mine[k].begin() + b))
              << dir << " part " << k << " range [" << b << ", " << b + c << ")";
        }
    }
  }
}

// The one checkpoint writer when a writer cannot write its file (the last
// rank's files capped at 1 KiB): every rank throws, naming that rank (with
// more than one) and its reason; rank 0 removes the partial directory; the previous checkpoint stays.
TEST_F(TpCheckpoint, AWriterThatCannotWriteStopsEveryRankNamingIt) {
  const int n = world->size(), me = world->rank();
  const model::ParamLayout whole(config(true));
  std::vector<float> w(static_cast<size_t>(whole.total()), 0.5f);
  const std::string run = (root_ / "capped").string();
  auto save = [&](int64_t steps) {
    train::write_checkpoint(*world, run, whole, parallel::own_shards(*world, whole, {w.data(), w.data(), w.data()}),
                            steps, {}, nlohmann::json::object());
  };
  save(1);
  struct rlimit old {};
  if (me == n - 1) {
    std::signal(SIGXFSZ, SIG_IGN);
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit cap = old;
    cap.rlim_cur = 1024;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &cap), 0);
  }
  std::string e;
  try {
    save(2);
  } catch (const IoError& x) {
    e = x.what();
  }
  if (me == n - 1) {
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  }
  EXPECT_NE(e.find("File too large"), std::string::npos) << e;
  if (n > 1) {  // alone, the save's own error needs no rank
    EXPECT_NE(e.find("(on rank " + std::to_string(n - 1) + ")"), std::string::npos) << e;
  }
  if (me == 0) {
    EXPECT_NE(e.find("the partial ckpt.tmp was removed; the previous checkpoint is intact"), std::string::npos) << e;
  }
  world->barrier();
  EXPECT_FALSE(std::filesystem::exists(run + "/ckpt.tmp"));
  EXPECT_EQ(train::read_checkpoint_meta(run)["optimizer_steps"], 1);
}

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
