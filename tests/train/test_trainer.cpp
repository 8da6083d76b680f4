// Training-loop guarantees: same seed -> bitwise same losses; K steps, stop,
// resume, M steps == K+M steps bitwise; checkpoints reject a different model
// or a truncated file; metrics.jsonl carries the documented keys; loss
// scaling is exact and skips (only) the updates whose gradients overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "kernels/bf16.h"
#include "optim/loss_scale.h"
#include "train/checkpoint/checkpoint.h"
#include "train/loop/trainer.h"
#include "train/tiny_run.h"
#include "train/trainer_fixture.h"

using namespace parallm;
namespace fs = std::filesystem;
using parallm::test_util::TrainerTest;

namespace {

TEST_F(TrainerTest, SameSeedGivesBitwiseSameLosses) {
  auto a = tiny("a"), b = tiny("b");
  a.train.max_iters = b.train.max_iters = 5;
  auto ra = train::run_training(a), rb = train::run_training(b);
  ASSERT_EQ(ra.train_losses.size(), 6u);
  EXPECT_EQ(ra.train_losses, rb.train_losses);
  EXPECT_LT(ra.train_losses.back(), ra.train_losses.front());
}

TEST_F(TrainerTest, DeterministicOnOneRankWithOneShardIsTheOrdinaryRun) {
  auto a = tiny("plain"), d = tiny("det");
  a.train.max_iters = d.train.max_iters = 5;
  d.apply_overrides({"ddp.deterministic=true"});
  auto ra = train::run_training(a), rd = train::run_training(d);
  ASSERT_EQ(ra.train_losses.size(), rd.train_losses.size());
  for (size_t i = 0; i < ra.train_losses.size(); ++i)
    EXPECT_NEAR(rd.train_losses[i], ra.train_losses[i], 1e-5 * ra.train_losses[i]);
  auto bad = tiny("bad");
  bad.apply_overrides({"ddp.deterministic=true", "ddp.shards=3"});  // batch 4 does not split into 3
  EXPECT_THROW(train::run_training(bad), ConfigError);
  EXPECT_FALSE(fs::exists(root_ / "bad"));  // refused before anything was written
}

TEST_F(TrainerTest, ResumeContinuesTheIdenticalTrajectory) {
  auto full = tiny("full");
  full.train.max_iters = 12;
  auto rf = train::run_training(full);
  ASSERT_EQ(rf.train_losses.size(), 13u);

  train::RunSummary rr;
  ASSERT_NO_FATAL_FAILURE(resume_at_6_matches({}, rf, &rr));
  EXPECT_EQ(rr.last_val_loss, rf.last_val_loss);
}

TEST_F(TrainerTest, CpuBf16IsDeterministicResumesBitwiseAndStaysNearFp32) {
  if (!kernels::bf16_products_supported()) GTEST_SKIP() << "no bf16 matrix hardware on this CPU";
  auto f = tiny("f32"), a = tiny("a"), b = tiny("b");
  f.train.max_iters = a.train.max_iters = b.train.max_iters = 12;
  a.apply_overrides({"train.dtype=bf16"});
  b.apply_overrides({"train.dtype=bf16"});
  auto rf = train::run_training(f), ra = train::run_training(a), rb = train::run_training(b);
  ASSERT_EQ(ra.train_losses.size(), 13u);
  EXPECT_EQ(ra.train_losses, rb.train_losses);
  EXPECT_NE(ra.train_losses, rf.train_losses);  // the products really were rounded
  for (size_t i = 0; i < ra.train_losses.size(); ++i)
    EXPECT_NEAR(ra.train_losses[i], rf.train_losses[i], 2e-2 * rf.train_losses[i]) << "iter " << i;

  train::RunSummary rr;
  ASSERT_NO_FATAL_FAILURE(resume_at_6_matches({"train.dtype=bf16"}, ra, &rr));
}

// Powers of two scale every gradient exactly: with no overflow, dynamic or
// static loss scaling gives bitwise the unscaled run, whatever the scale grew to.
TEST_F(TrainerTest, LossScalingByPowersOfTwoChangesNothingInFp32) {
  auto plain = tiny("plain"), dyn = tiny("dyn"), fixed = tiny("fixed"), top = tiny("top");
  plain.train.max_iters = dyn.train.max_iters = fixed.train.max_iters = top.train.max_iters = 12;
  dyn.apply_overrides({"train.loss_scale=dynamic", "train.loss_scale_window=3"});
  fixed.apply_overrides({"train.loss_scale=1024"});
  top.apply_overrides({"train.loss_scale=18446744073709551616"});  // 2^64, the largest scale
  auto rp = train::run_training(plain), rd = train::run_training(dyn), rf = train::run_training(fixed);
  auto rt = train::run_training(top);
  ASSERT_EQ(rp.train_losses.size(), 13u);
  EXPECT_EQ(rd.train_losses, rp.train_losses);
  EXPECT_EQ(rf.train_losses, rp.train_losses);
  EXPECT_EQ(rt.train_losses, rp.train_losses);
  EXPECT_EQ(rt.last_val_loss, rp.last_val_loss);
  EXPECT_EQ(rd.last_val_loss, rp.last_val_loss);
  EXPECT_EQ(rd.skipped_steps, 0);
  EXPECT_EQ(rd.loss_scale, 65536.0 * 16);  // 13 finite steps: doubled after every 3
  EXPECT_EQ(rf.loss_scale, 1024.0);
  EXPECT_EQ(rp.loss_scale, 1.0);
}

// Overflowing gradients (an inf written into them at iterations 0, 1, 2 and
// 7) skip their updates: the weights, so the next evaluation, stay as they
// were, the optimizer's step count does not advance, and the scale halves; it
// doubles after 3 finite steps. A resumed run continues the same trajectory
// with the same scale. Without dynamic scaling an overflow is an error.
TEST_F(TrainerTest, OverflowSkipsTheUpdateHalvesTheScaleAndResumesBitwise) {
  const test_util::InfGradAt fault("0,1,2,7");
  const std::vector<std::string> scaled = {"train.loss_scale=dynamic", "train.loss_scale_init=1024",
                                           "train.loss_scale_window=3", "train.eval_interval=1"};
  auto full = tiny("full");
  full.apply_overrides(scaled);
  full.train.max_iters = 12;
  auto rf = train::run_training(full);
  ASSERT_EQ(rf.train_losses.size(), 13u);
  EXPECT_EQ(rf.skipped_steps, 4);
  // 1024 -> 128 (iters 0-2), x2 after iters 3-5 -> 256, /2 at iter 7 -> 128, x2 after 8-10 -> 256.
  EXPECT_EQ(rf.loss_scale, 256.0);

  const std::vector<nlohmann::json> steps = records("full", "train");
  std::vector<double> val;  // val loss before iter i
  for (const auto& j : records("full", "eval")) val.push_back(j["val_loss"].get<double>());
  ASSERT_EQ(steps.size(), 13u);
  ASSERT_EQ(val.size(), 13u);
  const std::vector<double> want_scale = {1024, 512, 256, 128, 128, 128, 256, 256, 128, 128, 128, 256, 256};
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE(steps[i].contains("loss_scale") && steps[i].contains("skipped")) << steps[i].dump();
    const bool skip = steps[i]["skipped"].get<bool>();
    EXPECT_EQ(skip, i <= 2 || i == 7) << "iter " << i;
    EXPECT_EQ(steps[i].contains("grad_norm"), !skip) << "iter " << i;
    EXPECT_EQ(steps[i]["loss_scale"].get<double>(), want_scale[i]) << "iter " << i;
    if (i + 1 < val.size()) {
      if (skip)
        EXPECT_EQ(val[i + 1], val[i]) << "the skipped update at iter " << i << " changed the weights";
      else
        EXPECT_NE(val[i + 1], val[i]) << "iter " << i;
    }
  }
  // The checkpoint (saved at the iter-12 evaluation) counts only the updates made in iters 0-11.
  auto meta = train::read_checkpoint_meta((root_ / "full").string());
  EXPECT_EQ(meta["optimizer_steps"].get<int64_t>(), 12 - 4);
  EXPECT_EQ(meta["loss_scale"]["skipped"].get<int64_t>(), 4);

  for (const char* mode : {"train.loss_scale=off", "train.loss_scale=1024"}) {
    auto c = tiny(std::string("err") + mode);
    c.apply_overrides({mode});
    c.train.max_iters = 2;
    try {
      train::run_training(c);
      ADD_FAILURE() << "no error with " << mode;
    } catch (const NumericError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("non-finite gradient norm (inf) at iter 0"), std::string::npos) << m;
      if (std::string(mode).find("1024") != std::string::npos) {
        EXPECT_NE(m.find("static loss scale 1024"), std::string::npos) << m;
      }
    }
  }

  train::RunSummary rr;
  ASSERT_NO_FATAL_FAILURE(resume_at_6_matches(scaled, rf, &rr));
  EXPECT_EQ(rr.loss_scale, rf.loss_scale);
  EXPECT_EQ(rr.skipped_steps, rf.skipped_steps);
  EXPECT_EQ(rr.last_val_loss, rf.last_val_loss);
}

TEST_F(TrainerTest, MetricsHaveTheDocumentedKeys) {
  auto c = tiny("m");
  c.train.max_iters = 6;
  c.train.sample_tokens = 20;  // also exercises sampling at eval
  train::run_training(c);
  int train_recs = 0, eval_recs = 0;
  for (const auto& j : records("m")) {
    for (const char* k : {"step", "loss", "lr", "dt_ms", "dtf_ms", "dtb_ms", "tokens_per_s", "mfu"})
      EXPECT_TRUE(j.contains(k)) << k << " missing in " << j.dump();
    if (j["kind"] == "eval") {
      ++eval_recs;
      EXPECT_TRUE(j.contains("train_loss") && j.contains("val_loss"));
    } else {
      ++train_recs;
    }
  }
  EXPECT_EQ(train_recs, 7);
  EXPECT_EQ(eval_recs, 2);
  EXPECT_TRUE(fs::exists(root_ / "m" / "config.json"));
  EXPECT_TRUE(fs::exists(root_ / "m" / "train.log"));
}

TEST_F(TrainerTest, EvalOnlyLeavesTheCheckpointAlone) {
  auto c = tiny("eo");
  c.train.max_iters = 6;
  train::run_training(c);
  const auto stamp = fs::last_write_time(root_ / "eo" / "ckpt" / "model.bin");
  auto e = tiny("eo");
  e.train.init_from = train::InitFrom::Resume;
  e.train.eval_only = true;
  e.train.eval_iters = 5;
  e.train.always_save_checkpoint = true;
  auto r = train::run_training(e);
  EXPECT_TRUE(r.train_losses.empty());
  EXPECT_EQ(fs::last_write_time(root_ / "eo" / "ckpt" / "model.bin"), stamp);
}

// Issue 44, B1: a finished run's newest checkpoint resumes past train.max_iters
// (ckpt-<max_iters + 1>); an evaluation-only run of it evaluated nothing and
// reported a val loss of 0. It evaluates that final state, as a run one step
// longer does at its last iteration.
TEST_F(TrainerTest, EvalOnlyOfAFinishedRunEvaluatesItsFinalState) {
  train_to("fin", 6);  // its last state: ckpt-00000007
  auto e = resume_to("fin", 6);
  e.train.eval_only = true;
  const auto r = train::run_training(e);
  EXPECT_TRUE(r.evaluated_only);
  EXPECT_EQ(r.first_iter, 7);
  EXPECT_TRUE(r.train_losses.empty());
  const auto evals = records("fin", "eval");
  ASSERT_FALSE(evals.empty());
  EXPECT_EQ(evals.back()["step"], 7);
  auto longer = tiny("longer");  // evaluates the same state at its last iteration, 7
  longer.train.max_iters = 7;
  train::run_training(longer);
  const auto want = records("longer", "eval");
  ASSERT_EQ(want.back()["step"], 7);
  EXPECT_GT(r.last_val_loss, 0.0f);
  EXPECT_EQ(r.last_val_loss, want.back()["val_loss"].get<float>());
  EXPECT_EQ(evals.back()["val_loss"], want.back()["val_loss"]);
}

TEST_F(TrainerTest, CheckpointRejectsOtherModelsAndTruncation) {
  auto c = tiny("ck");
  c.train.max_iters = 6;
  train::run_training(c);
  model::GPTConfig other = c.model;
  other.vocab_size = 64;
  other.n_embd = 64;
  model::GPT m(other, 1, 8);
  EXPECT_THROW(train::load_checkpoint((root_ / "ck").string(), m, nullptr), IoError);
  test_util::keep_only_best_checkpoint(root_ / "ck");  // nothing to fall back on
  fs::resize_file(root_ / "ck" / "ckpt" / "model.bin", 100);
  auto r = tiny("ck");
  r.train.init_from = train::InitFrom::Resume;
  r.train.max_iters = 8;
  EXPECT_THROW(train::run_training(r), IoError);
  EXPECT_THROW(train::read_checkpoint_meta((root_ / "nothing").string()), IoError);
}

// Bad input is refused before the run directory changes: a scratch run over
// a checkpoint (without train.overwrite=true) and a prompt the vocabulary
// cannot encode leave every file as it was.
TEST_F(TrainerTest, BadInputLeavesAnExistingRunAlone) {
  auto c = tiny("keep");
  c.train.max_iters = 6;
  train::run_training(c);
  auto slurp = [&](const char* f) {
    std::ifstream in(root_ / "keep" / f, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string metrics = slurp("metrics.jsonl"), config = slurp("config.json"), log = slurp("train.log");
  const auto stamp = fs::last_write_time(root_ / "keep" / "ckpt" / "model.bin");
  auto again = tiny("keep");
  again.train.max_iters = 6;
  try {
    train::run_training(again);
    ADD_FAILURE() << "a scratch run replaced a checkpoint";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.overwrite=true"), std::string::npos) << e.what();
  }
  auto prompt = tiny("keep");
  prompt.apply_overrides({"train.init_from=resume", "train.max_iters=8", "train.sample_tokens=5",
                          "train.sample_prompt=\xC3\xB1"});  // a character the corpus lacks
  try {
    train::run_training(prompt);
    ADD_FAILURE() << "a prompt outside the vocabulary was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.sample_prompt"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp("metrics.jsonl"), metrics);
  EXPECT_EQ(slurp("config.json"), config);
  EXPECT_EQ(slurp("train.log"), log);
  EXPECT_EQ(fs::last_write_time(root_ / "keep" / "ckpt" / "model.bin"), stamp);
  auto eval_only = tiny("keep");
  eval_only.train.eval_only = true;  // of a fresh model, into the directory of a trained one: refused too
  EXPECT_THROW(train::run_training(eval_only), ConfigError);
  EXPECT_EQ(slurp("metrics.jsonl"), metrics);
  again.train.overwrite = true;  // asked for: the run starts over, and nothing of the old one stays
  again.train.max_iters = 2;
  again.train.eval_interval = 100;
  EXPECT_NO_THROW(train::run_training(again));
  EXPECT_EQ(train::read_checkpoint_meta((root_ / "keep").string())["iter"].get<int64_t>(), 2);
  EXPECT_EQ(records("keep", "train").size(), 3u);
}

// A resumed run given only the directory and a new max_iters continues the
// saved run (batch, dropout, gas, schedule from the checkpoint), and its
// metrics.jsonl reads as one run: each step once.
TEST_F(TrainerTest, ResumeTakesTheCheckpointsSettingsAndMetricsReadAsOneRun) {
  auto full = tiny("full");
  full.train.max_iters = 12;
  const auto rf = train::run_training(full);
  auto part = tiny("part");
  part.train.max_iters = 8;  // checkpoint at the iter-6 evaluation; iters 6-8 are written, then redone
  part.train.eval_interval = 6;
  part.train.always_save_checkpoint = false;
  train::run_training(part);
  test_util::keep_only_best_checkpoint(root_ / "part");  // as if killed before the state after iter 8 was saved
  // Saved at iter 8 too (the last iteration) if val improved; resume from whichever is there.
  const int64_t at = train::read_checkpoint_meta((root_ / "part").string())["iter"];
  train::RunConfig bare;
  bare.apply_overrides({"train.init_from=resume", "train.out_dir=" + (root_ / "part").string(), "train.max_iters=12",
                        "train.progress=false"});
  const auto rr = train::run_training(bare);
  ASSERT_EQ(rr.first_iter, at);
  for (size_t i = 0; i < rr.train_losses.size(); ++i)
    EXPECT_EQ(rr.train_losses[i], rf.train_losses[at + i]) << "iter " << at + i;
  std::vector<int64_t> steps;
  for (const auto& j : records("part", "train")) steps.push_back(j["step"]);
  std::vector<int64_t> want(13);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(steps, want);
}

// Every run ends evaluated and checkpointed at its last iteration, and its
// directory holds what `parallm sample` and tools need.
TEST_F(TrainerTest, ShortRunsEndWithACheckpointAndTheRunDirectoryIsComplete) {
  auto c = tiny("short");
  c.train.max_iters = 4;  // before the first eval_interval (6)
  c.train.always_save_checkpoint = false;
  // A rate of 0: the last evaluation equals the first, so no improvement saves it; being the last does.
  c.apply_overrides({"optimizer.learning_rate=0", "optimizer.min_lr=0"});
  train::run_training(c);
  EXPECT_EQ(train::read_checkpoint_meta((root_ / "short").string())["iter"].get<int64_t>(), 4);
  const auto evals = records("short", "eval");
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals.back()["step"].get<int64_t>(), 4);
  EXPECT_TRUE(records("short", "memory").empty());
  std::ifstream mem(root_ / "short" / "memory.json");
  const auto m = nlohmann::json::parse(mem);
  EXPECT_GT(m["total_peak_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(fs::exists(root_ / "short" / "meta.json"));
  auto none = tiny("no_final");
  none.train.max_iters = 4;
  none.train.final_eval = false;  // e.g. a benchmark: only the evaluations at multiples of eval_interval
  train::run_training(none);
  EXPECT_EQ(records("no_final", "eval").size(), 1u);
}

// An error that ends a run after its directory is open is the last line of train.log.
TEST_F(TrainerTest, TrainLogRecordsTheErrorThatEndedTheRun) {
  test_util::InfGradAt inf("0");
  auto c = tiny("fail");
  c.train.max_iters = 2;
  EXPECT_THROW(train::run_training(c), NumericError);
  std::ifstream f(root_ / "fail" / "train.log");
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  EXPECT_NE(last.find("error: [train] non-finite gradient norm"), std::string::npos) << last;
}

}  // namespace
