// Pipeline parallelism through the trainer, under mpirun: every schedule with
// the world as the pipeline against one rank with the same global batch
// (each rank runs that reference alone), uneven stages, pp x tp and dp x pp
// with ZeRO-1, the tied token table identical on the first and last stage
// after every step, and a pipeline checkpoint resumed by the same pipeline and
// by one rank. Dropout on, vocabulary 65 (no degree divides it).
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "parallel/dist_run.h"
#include "train/loop/step.h"
#include "train/session.h"

using namespace parallm;
using test_util::world;

namespace {

class PipelineTrainTest : public test_util::DistRunTest {
 protected:
  // 2 layers per rank (interleaved V = 2 fits), optimizer.gas = the world (interleaved's rule).
  train::RunConfig run(const std::string& out, int64_t batch, int64_t iters, std::vector<std::string> extra = {}) {
    auto c = tiny(out, batch);
    const int n = world->size();
    c.apply_overrides({"model.n_layer=" + std::to_string(2 * n), "model.n_head=4", "model.n_embd=32",
                       "model.vocab_size=65", "model.block_size=16", "optimizer.gas=" + std::to_string(n),
                       "train.max_iters=" + std::to_string(iters)});
    c.apply_overrides(extra);
    return c;
  }
  train::RunSummary alone(const std::string& out, int64_t batch, int64_t iters) {
    return train::run_training(run(out + std::to_string(world->rank()), batch, iters));
  }
  std::string pp() const { return "parallel.pp=" + std::to_string(world->size()); }
};

}  // namespace

TEST_F(PipelineTrainTest, EveryScheduleMatchesOneRank) {
  const auto one = alone("one", 2, 8);
  for (const char* kind : {"gpipe", "1f1b", "zb-h1"}) {
    auto r = train::run_training(
        run(std::string("pp_") + kind, 2, 8, {pp(), std::string("parallel.pp_schedule=") + kind}), world);
    expect_close(r, one, 1e-5, pp() + " " + kind + " vs 1 rank");
  }
  auto r = train::run_training(
      run("pp_interleaved", 2, 8, {pp(), "parallel.pp_schedule=interleaved", "parallel.pp_virtual=2"}), world);
  expect_close(r, one, 1e-5, pp() + " interleaved V=2 vs 1 rank");
}

// Recompute under 1F1B: the last stage runs a micro-batch's backward right
// after its forward (the shared buffers still hold that block: not redone),
// the others after other micro-batches' forwards (redone). Same bits either way.
TEST_F(PipelineTrainTest, RecomputeMatchesOneRank) {
  const auto one = alone("rc_one", 2, 6);
  for (const char* mode : {"selective", "full"}) {
    auto r = train::run_training(run(std::string("rc_") + mode, 2, 6, {pp(), std::string("model.recompute=") + mode}),
                                 world);
    expect_close(r, one, 1e-5, pp() + " 1f1b with model.recompute=" + mode + " vs 1 rank");
  }
}

TEST_F(PipelineTrainTest, UnevenStagesMatchOneRank) {
  // All but one layer on the last stage.
  const int n = world->size();
  std::string counts;
  for (int s = 0; s < n; ++s) {
    if (s) counts += ',';
    counts += std::to_string(s + 1 < n ? 1 : n + 1);
  }
  auto r = train::run_training(run("uneven", 2, 6, {pp(), "parallel.pp_layers=" + counts}), world);
  expect_close(r, alone("uneven_one", 2, 6), 1e-5, pp() + " layers " + counts + " vs 1 rank");
}

TEST_F(PipelineTrainTest, WithTensorAndDataParallelMatchesOneRank) {
  const int n = world->size();
  if (n != 4) GTEST_SKIP() << "pp 2 x tp 2 and dp 2 x pp 2 need 4 ranks";
  auto ptp = train::run_training(run("pptp", 2, 6, {"parallel.pp=2", "parallel.tp=2", "optimizer.gas=2"}), world);
  auto one = train::run_training(run("pptp_one" + std::to_string(world->rank()), 2, 6, {"optimizer.gas=2"}));
  expect_close(ptp, one, 1e-5, "pp 2 x tp 2 vs 1 rank");
  auto dpp = train::run_training(run("dppp", 1, 6, {"parallel.pp=2", "zero.stage=1", "optimizer.gas=2"}), world);
  expect_close(dpp, one, 1e-5, "dp 2 x pp 2 with ZeRO-1 vs 1 rank");
  auto sp = train::run_training(
      run("pptpsp", 2, 6, {"parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true", "optimizer.gas=2"}),
      world);
  expect_close(sp, one, 1e-5, "pp 2 x tp 2 with sequence parallelism vs 1 rank");
}

// Dynamic loss scaling: an overflow on one stage (PARALLM_FAULT_INF_GRAD
// writes an inf into every rank's gradients) skips the step on every stage,
// which then follow one rank with the same fault.
TEST_F(PipelineTrainTest, LossScalingSkipsTheSameStepsOnEveryStage) {
  const test_util::InfGradAt fault("1,4");
  const std::vector<std::string> scaled = {"train.loss_scale=dynamic", "train.loss_scale_window=2"};
  auto with = [&](std::vector<std::string> kv) {
    kv.insert(kv.end(), scaled.begin(), scaled.end());
    return kv;
  };
  auto r = train::run_training(run("ls", 2, 8, with({pp()})), world);
  auto r1 = train::run_training(run("ls_one" + std::to_string(world->rank()), 2, 8, with({})));
  EXPECT_EQ(r.skipped_steps, 2);
  EXPECT_EQ(r1.skipped_steps, 2);
  EXPECT_EQ(r.loss_scale, r1.loss_scale);
  expect_close(r, r1, 2e-5, pp() + " with dynamic loss scaling vs 1 rank");
}

TEST_F(PipelineTrainTest, TiedTableIsTheSameOnBothEndsAfterEveryStep) {
  std::vector<std::vector<std::string>> layouts = {{pp()}};
  if (world->size() == 4) {  // with data parallelism over each stage: DDP, and ZeRO-1
    layouts.push_back({"parallel.pp=2", "model.batch_size=1"});
    layouts.push_back({"parallel.pp=2", "model.batch_size=1", "zero.stage=1"});
  }
  for (const auto& layout : layouts) {
    std::optional<train::RunDir> dir;
    std::string nothing;
    auto s = train::open_session(run("tied" + std::to_string(layout.size()), 2, 6, layout), *world, 0, dir, &nothing);
    ASSERT_TRUE(s);
    auto schedule = train::make_schedule(*s);
    comm::Communicator* ends = s->mesh->ends();
    for (int64_t it = 0; it < 6; ++it) {
      train::optimizer_step(*s, *schedule, it, s->sched.at(it));
      if (!ends) continue;
      const model::ParamSlot& w = s->model->layout().find("transformer.wte.weight");
      Tensor mine = Tensor::view_of(s->model->params() + w.offset, {w.numel}, DType::F32);
      Tensor other = Tensor::empty({w.numel}, DType::F32);
      if (ends->rank() == 0) {
        ends->recv(other, 1);
        ASSERT_EQ(0, std::memcmp(mine.raw(), other.raw(), w.numel * sizeof(float)))
            << "wte differs after step " << it << " with " << layout.back();
      } else {
        ends->send(mine, 0);
      }
    }
  }
}

TEST_F(PipelineTrainTest, ACheckpointResumesInThePipelineAndOnOneRank) {
  auto full = train::run_training(run("pp_full", 2, 12, {pp()}), world);
  auto part = run("pp_part", 2, 6, {pp()});
  train::run_training(part, world);
  world->barrier();
  const auto mine = root_ / ("pp_alone" + std::to_string(world->rank()));
  std::filesystem::create_directories(mine);
  std::filesystem::copy(root_ / "pp_part" / "ckpt", mine / "ckpt", std::filesystem::copy_options::recursive);
  world->barrier();
  part.train.max_iters = 12;
  part.train.init_from = train::InitFrom::Resume;
  auto resumed = train::run_training(part, world);  // from the state after iteration 6: iterations 7..12
  auto one = run(mine.filename().string(), 2, 12, {"train.init_from=resume"});
  auto alone_resumed = train::run_training(one);  // from ckpt/, saved at the evaluation of iteration 6: 6..12
  // An evaluation-only run of the finished pipeline checkpoint (the state
  // after iteration 12) gives the same val loss as a pipeline and alone.
  if (world->rank() == 0)
    std::filesystem::copy(root_ / "pp_part", root_ / "pp_eval_alone", std::filesystem::copy_options::recursive);
  world->barrier();
  auto eval = run("pp_part", 2, 12, {pp(), "train.init_from=resume", "train.eval_only=true"});
  const float pp_val = train::run_training(eval, world).last_val_loss;
  if (world->rank() == 0) {
    auto eval1 = run("pp_eval_alone", 2, 12, {"train.init_from=resume", "train.eval_only=true"});
    EXPECT_NEAR(pp_val, train::run_training(eval1).last_val_loss, 1e-5 * pp_val);
  }
  for (const auto* r : {&resumed, &alone_resumed}) {
    const size_t n = r->train_losses.size();
    ASSERT_EQ(n, r == &resumed ? 6u : 7u);
    const std::vector<float> tail(full.train_losses.end() - static_cast<std::ptrdiff_t>(n), full.train_losses.end());
    const double d = max_rel_diff(r->train_losses, tail);
    if (world->rank() == 0)
      std::printf("resumed %s: max relative difference %.3g\n", r == &resumed ? "pp" : "alone", d);
    EXPECT_LT(d, 1e-5);
  }
}

TEST_F(PipelineTrainTest, OneRanksCheckpointResumesInThePipeline) {
  // Rank 0 trains alone and saves; the whole world resumes it as a pipeline.
  auto full = alone("one_full", 2, 12);
  if (world->rank() == 0) train::run_training(run("one_part", 2, 6));
  world->barrier();
  auto part = run("one_part", 2, 12, {pp(), "train.init_from=resume"});
  auto resumed = train::run_training(part, world);  // from the state after iteration 6
  const std::vector<float> tail(full.train_losses.end() - 6, full.train_losses.end());
  ASSERT_EQ(resumed.train_losses.size(), tail.size());
  const double d = max_rel_diff(resumed.train_losses, tail);
  if (world->rank() == 0)
    std::printf("1 rank's checkpoint resumed at %s: max relative difference %.3g\n", pp().c_str(), d);
  EXPECT_LT(d, 1e-5);
}

TEST_F(PipelineTrainTest, AZeroOnePipelineCheckpointResumesInOtherLayouts) {
  if (world->size() != 4) GTEST_SKIP() << "dp 2 x pp 2 needs 4 ranks";
  const std::vector<std::string> dppp = {"parallel.pp=2", "zero.stage=1", "optimizer.gas=2"};
  auto full = train::run_training(run("z1_full", 1, 12, dppp), world);
  auto part = run("z1_part", 1, 6, dppp);
  train::run_training(part, world);
  world->barrier();
  if (world->rank() == 0)
    std::filesystem::copy(root_ / "z1_part", root_ / "z1_pp4", std::filesystem::copy_options::recursive);
  world->barrier();
  // The same layout, then pp 4 with the same global batch (micro-batch 2, no dp).
  part.train.max_iters = 12;
  part.train.init_from = train::InitFrom::Resume;
  auto same = train::run_training(part, world);
  auto pp4 =
      train::run_training(run("z1_pp4", 2, 12, {"parallel.pp=4", "optimizer.gas=2", "train.init_from=resume"}), world);
  const std::vector<float> tail(full.train_losses.end() - 6, full.train_losses.end());  // iterations 7..12
  for (const auto* r : {&same, &pp4}) {
    ASSERT_EQ(r->train_losses.size(), tail.size());
    const double d = max_rel_diff(r->train_losses, tail);
    if (world->rank() == 0)
      std::printf("dp 2 x pp 2 ZeRO-1 checkpoint resumed %s: max relative difference %.3g\n",
                  r == &same ? "in place" : "at pp 4", d);
    EXPECT_LT(d, 1e-5);
  }
}

int main(int argc, char** argv) {
  return test_util::dist_test_main(argc, argv);
}
