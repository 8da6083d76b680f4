// Tensor parallelism through the trainer, under mpirun: a run with the world
// split into tp (and dp) against one rank with the whole batch (each rank runs
// that reference alone), a resumed tp run against the uninterrupted one, and
// a tp checkpoint resumed by one rank. Dropout on, vocabulary 65 (no degree
// divides it), 12 heads so tp = 2, 3, 4 and 6 all split them.
#include <filesystem>
#include <string>

#include "parallel/dist_run.h"

using namespace parallm;
using test_util::world;

namespace {

class TpTrainTest : public test_util::DistRunTest {
 protected:
  train::RunConfig run(const std::string& out, int64_t batch, int64_t iters, std::vector<std::string> extra = {}) {
    auto c = tiny(out, batch);
    c.apply_overrides({"model.n_head=12", "model.n_embd=48", "model.vocab_size=65", "model.block_size=24",
                       "train.max_iters=" + std::to_string(iters)});
    c.apply_overrides(extra);
    return c;
  }
  // The one-rank reference, run by each rank alone in its own directory.
  train::RunSummary alone(const std::string& out, int64_t batch, int64_t iters) {
    return train::run_training(run(out + std::to_string(world->rank()), batch, iters));
  }
  static void expect_close(const train::RunSummary& got, const train::RunSummary& want, double tol,
                           const std::string& what) {
    ASSERT_EQ(got.train_losses.size(), want.train_losses.size()) << what;
    const double d = max_rel_diff(got.train_losses, want.train_losses);
    if (world->rank() == 0)
      std::printf("%s: max relative train-loss difference %.3g over %zu steps\n", what.c_str(), d,
                  got.train_losses.size());
    EXPECT_LT(d, tol) << what;
    EXPECT_NEAR(got.last_val_loss, want.last_val_loss, tol * want.last_val_loss) << what;
  }
};

}  // namespace

TEST_F(TpTrainTest, TensorParallelMatchesOneRank) {
  const int n = world->size();
  auto r = train::run_training(run("tp", 2, 12, {"parallel.tp=" + std::to_string(n)}), world);
  const auto one = alone("tp_one", 2, 12);
  expect_close(r, one, 1e-5, "tp=" + std::to_string(n) + " vs 1 rank");
  auto sp = train::run_training(
      run("sp", 2, 12, {"parallel.tp=" + std::to_string(n), "parallel.sequence_parallel=true"}), world);
  expect_close(sp, one, 1e-5, "tp=" + std::to_string(n) + " with sp vs 1 rank");
}

TEST_F(TpTrainTest, DataTimesTensorParallelMatchesOneRank) {
  const int n = world->size();
  if (n % 2 != 0 || n < 4) GTEST_SKIP() << "dp 2 x tp needs an even world of 4 or more";
  auto r = train::run_training(run("dptp", 2, 12, {"parallel.tp=" + std::to_string(n / 2)}), world);
  expect_close(r, alone("dptp_one", 4, 12), 1e-5, "dp 2 x tp " + std::to_string(n / 2) + " vs 1 rank");
  auto d = train::run_training(
      run("dptp_det", 2, 12, {"parallel.tp=" + std::to_string(n / 2), "ddp.deterministic=true"}), world);
  expect_close(d, r, 1e-5, "deterministic dp 2 x tp vs DDP");
}

TEST_F(TpTrainTest, ACheckpointResumesAtTheSameAndAtOneRank) {
  const int n = world->size();
  const std::string tp = "parallel.tp=" + std::to_string(n);
  auto full = train::run_training(run("tp_full", 2, 12, {tp}), world);
  auto part = run("tp_part", 2, 6, {tp});
  train::run_training(part, world);
  world->barrier();
  // One rank resumes a copy of the tp checkpoint alone.
  const auto mine = root_ / ("tp_alone" + std::to_string(world->rank()));
  std::filesystem::create_directories(mine);
  std::filesystem::copy(root_ / "tp_part" / "ckpt", mine / "ckpt", std::filesystem::copy_options::recursive);
  world->barrier();
  part.train.max_iters = 12;
  part.train.init_from = train::InitFrom::Resume;
  auto resumed = train::run_training(part, world);
  ASSERT_EQ(resumed.first_iter, 6);
  ASSERT_EQ(resumed.train_losses.size(), 7u);
  for (size_t i = 0; i < resumed.train_losses.size(); ++i)
    EXPECT_EQ(resumed.train_losses[i], full.train_losses[6 + i]) << "iter " << 6 + i;
  auto one = run("tp_alone" + std::to_string(world->rank()), 2, 12, {"train.init_from=resume"});
  auto r1 = train::run_training(one);
  ASSERT_EQ(r1.train_losses.size(), 7u);
  std::vector<float> tail(full.train_losses.begin() + 6, full.train_losses.end());
  const double d = max_rel_diff(r1.train_losses, tail);
  if (world->rank() == 0) std::printf("tp=%d checkpoint resumed by 1 rank: max relative difference %.3g\n", n, d);
  EXPECT_LT(d, 1e-5);
}

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
