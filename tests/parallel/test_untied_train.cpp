// Untied embeddings (model.tie_embeddings=false, issue 45) through the trainer,
// under mpirun with 2 ranks: tied and untied runs each equal the one-rank run
// over 50 steps at tp 2, pp 2 (the head on the last stage alone), ZeRO-3 and
// cp 2; an untied head is a parameter of its own (the runs differ from the
// tied ones); an untied pipeline checkpoint resumes at one rank. Dropout on,
// vocabulary 65 (not divided by 2's padding-free split of the tiny dataset's).
#include <filesystem>
#include <string>

#include "parallel/dist_run.h"
#include "train/checkpoint/checkpoint.h"

using namespace parallm;
using test_util::world;

namespace {

class UntiedTest : public test_util::DistRunTest {
 protected:
  train::RunConfig run(const std::string& out, int64_t batch, bool tie, int64_t iters,
                       std::vector<std::string> extra = {}) {
    auto c = tiny(out, batch);
    c.apply_overrides({"model.n_head=4", "model.vocab_size=65",
                       "model.tie_embeddings=" + std::string(tie ? "true" : "false"),
                       "train.max_iters=" + std::to_string(iters), "optimizer.lr_decay_iters=" + std::to_string(iters),
                       "train.eval_interval=25"});
    c.apply_overrides(extra);
    return c;
  }
  // The one-rank reference, run by each rank alone in its own directory.
  train::RunSummary alone(const std::string& out, int64_t batch, bool tie, int64_t iters) {
    return train::run_training(run(out + std::to_string(world->rank()), batch, tie, iters));
  }
};

}  // namespace

TEST_F(UntiedTest, TiedAndUntiedRunsEachEqualOneRankInEveryLayout) {
  if (world->size() != 2) GTEST_SKIP() << "the layouts are of 2 ranks";
  constexpr int64_t kIters = 49;  // 50 steps
  std::vector<float> tied_losses;
  for (bool tie : {true, false}) {
    const std::string t = tie ? "tied" : "untied";
    const auto one = alone(t + "_one", 2, tie, kIters);
    const auto one_b4 = alone(t + "_one_b4", 4, tie, kIters);  // the global batch of 2 data-parallel ranks
    for (const auto& [name, keys] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"tp2", {"parallel.tp=2"}},
             {"tp2_sp", {"parallel.tp=2", "parallel.sequence_parallel=true"}},
             {"pp2", {"parallel.pp=2"}},
             {"cp2", {"parallel.cp=2"}}}) {
      const auto r = train::run_training(run(t + "_" + name, 2, tie, kIters, keys), world);
      expect_close(r, one, 1e-5, t + " " + name + " vs 1 rank");
    }
    const auto z3 = train::run_training(run(t + "_zero3", 2, tie, kIters, {"zero.stage=3"}), world);
    expect_close(z3, one_b4, 1e-5, t + " zero3 (dp 2) vs 1 rank");
    if (tie) {
      tied_losses = one.train_losses;
    } else {
      ASSERT_EQ(one.train_losses.size(), tied_losses.size());
      EXPECT_GT(max_rel_diff(one.train_losses, tied_losses), 1e-3) << "an untied head is a parameter of its own";
    }
  }
}

TEST_F(UntiedTest, AnUntiedPipelineCheckpointResumesAtOneRank) {
  if (world->size() != 2) GTEST_SKIP() << "pp 2";
  const auto full =
      train::run_training(run("full" + std::to_string(world->rank()), 2, false, 12, {"train.eval_interval=6"}));
  auto part = run("pp_part", 2, false, 6, {"parallel.pp=2", "optimizer.lr_decay_iters=12", "train.eval_interval=6"});
  train::run_training(part, world);
  world->barrier();
  const auto mine = root_ / ("alone" + std::to_string(world->rank()));
  std::filesystem::create_directories(mine);
  std::filesystem::copy(root_ / "pp_part" / "ckpt", mine / "ckpt", std::filesystem::copy_options::recursive);
  world->barrier();
  auto one =
      run("alone" + std::to_string(world->rank()), 2, false, 12, {"train.init_from=resume", "train.eval_interval=6"});
  const auto resumed = train::run_training(one);
  ASSERT_EQ(resumed.first_iter, 6);  // the state evaluated (and saved) before iteration 6
  ASSERT_EQ(resumed.train_losses.size(), 7u);
  const std::vector<float> tail(full.train_losses.begin() + 6, full.train_losses.end());
  const double d = max_rel_diff(resumed.train_losses, tail);
  if (world->rank() == 0) std::printf("untied pp 2 checkpoint resumed by 1 rank: max relative difference %.3g\n", d);
  EXPECT_LT(d, 1e-5);
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
