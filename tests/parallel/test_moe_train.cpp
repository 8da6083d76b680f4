// Mixtures of experts (issue 47) through the trainer under mpirun: every
// layout of a tiny MoE Llama equals the one-rank run (max relative
// train-loss difference 1e-5 over 50 steps), dropout 0.1, the balancing and
// z-losses on, 8 experts top-2, a vocabulary of 65 the degrees do not divide.
// Two ranks: tp 2 (+ sp: each expert split by columns, the router whole),
// every pipeline schedule, cp 2, DDP and ZeRO 1-3 (the balancing loss's
// counts summed over the data group); a shared expert, sigmoid scores and
// dense first layers. Four ranks: dp 2 x pp 2, dp 2 x cp 2 and (20 steps: a
// near-tie's routing flip after that, docs/moe.md) dp 2 x tp 2.
#include <string>

#include "parallel/dist_run.h"

using namespace parallm;
using test_util::world;

namespace {

using Layouts = std::vector<std::pair<std::string, std::vector<std::string>>>;

class MoeTest : public test_util::DistRunTest {
 protected:
  train::RunConfig run(const std::string& out, int64_t batch, int64_t iters, std::vector<std::string> extra = {}) {
    auto c = tiny(out, batch);
    c.apply_overrides({"model.arch=llama", "model.n_layer=3", "model.n_head=4", "model.n_kv_head=2", "model.head_dim=8",
                       "model.intermediate_size=48", "model.vocab_size=65", "model.moe_experts=8", "model.moe_top_k=2",
                       "model.moe_intermediate_size=16", "model.moe_aux_coef=0.01", "model.moe_z_coef=0.001",
                       "train.max_iters=" + std::to_string(iters), "optimizer.lr_decay_iters=" + std::to_string(iters),
                       "train.eval_interval=25"});
    c.apply_overrides(extra);
    return c;
  }
  train::RunSummary alone(const std::string& out, int64_t batch, int64_t iters, std::vector<std::string> extra = {}) {
    return train::run_training(run(out + std::to_string(world->rank()), batch, iters, std::move(extra)));
  }
  void expect_layouts(const std::string& what, const train::RunSummary& one, int64_t batch, int64_t iters,
                      const Layouts& layouts, const std::vector<std::string>& model = {}) {
    for (const auto& [name, keys] : layouts) {
      std::vector<std::string> all = model;
      all.insert(all.end(), keys.begin(), keys.end());
      const auto r = train::run_training(run(what + "_" + name, batch, iters, all), world);
      expect_close(r, one, 1e-5, what + " " + name + " vs 1 rank");
    }
  }
};

constexpr int64_t kIters = 49;  // 50 steps

}  // namespace

TEST_F(MoeTest, EveryTwoRankLayoutEqualsOneRank) {
  if (world->size() != 2) GTEST_SKIP() << "the layouts are of 2 ranks";
  const auto one = alone("one", 2, kIters);
  expect_layouts("moe", one, 2, kIters,
                 {{"tp2", {"parallel.tp=2"}},
                  {"tp2_sp", {"parallel.tp=2", "parallel.sequence_parallel=true"}},
                  {"pp2_1f1b", {"parallel.pp=2", "parallel.pp_schedule=1f1b"}},
                  {"pp2_zbh1", {"parallel.pp=2", "parallel.pp_schedule=zb-h1"}},
                  {"cp2_ring", {"parallel.cp=2", "parallel.cp_kind=ring"}}});
  const auto one_b4 = alone("one_b4", 4, kIters);  // the global batch of 2 data-parallel ranks
  expect_layouts("moe", one_b4, 2, kIters, {{"ddp", {}}, {"zero1", {"zero.stage=1"}}, {"zero3", {"zero.stage=3"}}});
}

TEST_F(MoeTest, SharedExpertSigmoidAndDenseLayersEqualOneRank) {
  if (world->size() != 2) GTEST_SKIP() << "the layouts are of 2 ranks";
  const std::vector<std::string> ds = {"model.moe_shared_experts=1", "model.moe_score=sigmoid",
                                       "model.moe_routed_scale=2.5", "model.moe_first_layer=1", "model.moe_bias=true"};
  const auto one = alone("ds_one", 2, kIters, ds);
  expect_layouts("ds", one, 2, kIters,
                 {{"tp2_sp", {"parallel.tp=2", "parallel.sequence_parallel=true"}}, {"pp2", {"parallel.pp=2"}}}, ds);
  const auto one_b4 = alone("ds_one_b4", 4, kIters, ds);
  expect_layouts("ds", one_b4, 2, kIters, {{"zero2", {"zero.stage=2"}}}, ds);
}

TEST_F(MoeTest, FourRankMeshesEqualOneRank) {
  if (world->size() != 4) GTEST_SKIP() << "the layouts are of 4 ranks";
  const auto one_b4 = alone("one_b4", 4, kIters);
  expect_layouts("moe4", one_b4, 2, kIters, {{"dp2_pp2", {"parallel.pp=2"}}});
  // dp 2 x tp 2 carries both layouts' rounding (the gradients' all-reduce, the partial sums): by step 21 a
  // token whose 2nd and 3rd experts' scores are that close swaps them (the gradient norm jumps by 1e-4 while
  // the losses agree to 2e-7), and from step 35 the losses differ by 1e-5 to 4e-4 (docs/moe.md: routing
  // flips). The first 20 steps are the rounding's alone.
  const auto one_b4_short = alone("one_b4_short", 4, 19);
  expect_layouts("moe4", one_b4_short, 2, 19, {{"dp2_tp2", {"parallel.tp=2"}}});
  const auto one_b2 = alone("one_b2", 2, kIters);
  expect_layouts("moe4", one_b2, 1, kIters, {{"dp2_cp2", {"parallel.cp=2"}}});
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
