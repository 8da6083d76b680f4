// Nothing lost, nothing silent: a damaged checkpoint, a dataset that is not
// the run's, a meta.json that does not describe its data, a finished run
// resumed again and a disk that fills are each an error naming the file or
// key (or a clear "nothing to do"), and none of them changes the run.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "data/prepare.h"
#include "data/vocab.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/ckpt_dirs.h"
#include "train/loop/sample.h"
#include "train/records/run_lock.h"
#include "train/trainer_fixture.h"

using namespace parallm;
namespace fs = std::filesystem;
using parallm::test_util::slurp;
using parallm::test_util::TrainerTest;

namespace {

// Every file under `dir` with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = slurp(e.path());
  return files;
}

void flip_byte(const fs::path& p, std::streamoff at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0xff));
}

// The message of the parallm error `body` throws ("" if it throws none).
template <class F>
std::string error_of(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void edit_state(const fs::path& run, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path p = run / "ckpt" / "state.json";
  auto s = nlohmann::json::parse(slurp(p));
  edit(s);
  std::ofstream(p) << s.dump(1);
}

// Writes under this process fail past `bytes` per file (EFBIG, as a full disk
// gives ENOSPC), for the scope of a test.
struct FileSizeLimit {
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = old_;
    r.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() { ::setrlimit(RLIMIT_FSIZE, &old_); }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  rlimit old_{};
};

TEST_F(TrainerTest, AFinishedRunIsLeftAloneAndALaterMaxItersTrainsOnFromItsLastState) {
  train_to("done", 6);  // trains iterations 0..6 and saves the state after the last one
  EXPECT_TRUE(fs::exists(root_ / "done" / "ckpt-00000007" / "state.json"));
  const auto before = snapshot(root_ / "done");
  for (int64_t max : {6, 5}) {
    auto r = resume_to("done", max);
    const auto s = train::run_training(r);
    EXPECT_NE(s.nothing_to_do.find("resumes at iteration 7, past the last one, train.max_iters=" + std::to_string(max)),
              std::string::npos)
        << s.nothing_to_do;
    EXPECT_TRUE(s.train_losses.empty());
    EXPECT_EQ(snapshot(root_ / "done"), before) << "max_iters=" << max;
  }
  // A checkpoint that resumes at train.max_iters has that iteration left to train.
  const auto s = train::run_training(resume_to("done", 7));
  EXPECT_TRUE(s.nothing_to_do.empty()) << s.nothing_to_do;
  EXPECT_EQ(s.first_iter, 7);
  EXPECT_EQ(s.train_losses.size(), 1u);
}

TEST_F(TrainerTest, ADamagedCheckpointIsRefusedNamingTheFile) {
  train_to("dmg", 6);
  test_util::keep_only_best_checkpoint(root_ / "dmg");  // nothing to fall back on
  const fs::path ck = root_ / "dmg" / "ckpt";
  for (const auto& [file, at] :
       {std::pair{"model.bin", std::streamoff{3}},
        std::pair{"optim.bin", static_cast<std::streamoff>(fs::file_size(ck / "optim.bin") / 2)}}) {
    flip_byte(ck / file, at);
    const auto before = snapshot(root_ / "dmg");
    auto r = resume_to("dmg", 8);
    const std::string e = error_of([&] { train::run_training(r); });
    EXPECT_NE(e.find(std::string(file) + " is damaged"), std::string::npos) << e;
    EXPECT_EQ(snapshot(root_ / "dmg"), before) << "a refused resume changed the run";
    if (std::string(file) == "model.bin") {  // sample reads the weights only, and checks them too
      const auto meta = train::read_checkpoint_meta((root_ / "dmg").string());
      model::GPT m(train::RunConfig::from_json(meta["config"]).model, 1, 32);
      const std::string e2 = error_of([&] { train::load_checkpoint((root_ / "dmg").string(), m, nullptr); });
      EXPECT_NE(e2.find("model.bin is damaged"), std::string::npos) << e2;
    }
    flip_byte(ck / file, at);  // mended: it loads again
  }
  auto r = resume_to("dmg", 8);
  EXPECT_NO_THROW(train::run_training(r));
}

// Issue 44, B4: a checkpoint whose state.json is missing, truncated or
// altered was passed over without a word (tried last, never reached); it is
// tried where its name puts it and named when skipped, by a resume and by
// `sample`'s choice alike.
TEST_F(TrainerTest, ACheckpointWhoseStateDoesNotReadIsNamedWhenSkipped) {
  auto c = tiny("sj");
  c.train.max_iters = 6;
  c.train.checkpoint_interval = 3;
  train::run_training(c);  // ckpt-00000006 and ckpt-00000007 (the final state), ckpt/ of iteration 6
  const fs::path newest = root_ / "sj" / "ckpt-00000007" / "state.json";
  const std::string good = slurp(newest);
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  spdlog::default_logger()->sinks().push_back(sink);
  for (const std::string damage : {"missing", "truncated", "altered"}) {
    SCOPED_TRACE(damage);
    if (damage == "missing") fs::remove(newest);
    if (damage == "truncated") std::ofstream(newest) << good.substr(0, good.size() / 2);
    if (damage == "altered") std::ofstream(newest) << R"({"iter": 99})";
    const auto meta = train::choose_checkpoint((root_ / "sj").string(), nullptr);
    EXPECT_EQ(meta["iter"], 6);
    std::string said;
    for (const auto& line : sink->last_formatted()) said += line;
    EXPECT_NE(said.find("skipping " + (root_ / "sj" / "ckpt-00000007").string() + ": "), std::string::npos) << said;
    EXPECT_NE(said.find("state.json"), std::string::npos) << said;
    train::ChooseOptions best;  // sample's choice: ckpt/ first, whatever a damaged step one holds
    best.best_first = true;
    EXPECT_EQ(train::choose_checkpoint((root_ / "sj").string(), nullptr, best)["_dir"],
              (root_ / "sj" / "ckpt").string());
  }
  fs::remove(newest);  // and a damaged best one, whose iteration is unknown, is tried first and named
  std::ofstream(root_ / "sj" / "ckpt" / "state.json") << "{";
  std::ofstream(newest) << good;
  train::ChooseOptions best;
  best.best_first = true;
  EXPECT_EQ(train::choose_checkpoint((root_ / "sj").string(), nullptr, best)["iter"], 7);
  std::string said;
  for (const auto& line : sink->last_formatted()) said += line;
  EXPECT_NE(said.find("skipping " + (root_ / "sj" / "ckpt").string() + ": "), std::string::npos) << said;
  spdlog::default_logger()->sinks().pop_back();
}

// Issue 44, B2: a run directory held by another run is refused, naming the
// holder, before anything is read or written (two runs in one directory
// overwrote each other's checkpoints and records).
TEST_F(TrainerTest, ARunDirectoryInUseIsRefusedNamingItsHolder) {
  train_to("lk", 6);
  const auto before = snapshot(root_ / "lk");
  {
    train::RunLock held((root_ / "lk").string(), "parallm train (the other run)");
    auto again = tiny("lk");
    again.train.overwrite = true;
    const std::string e = error_of([&] { train::run_training(again); });
    EXPECT_NE(e.find("is in use: process " + std::to_string(::getpid()) + " on host "), std::string::npos) << e;
    EXPECT_NE(e.find("parallm train (the other run)"), std::string::npos) << e;
    auto r = resume_to("lk", 8);
    EXPECT_NE(error_of([&] { train::run_training(r); }).find("is in use"), std::string::npos);
    auto fresh = tiny("lk_new/sub");  // a directory the refused run would create is not created
    train::RunLock other((root_ / "lk_new" / "sub").string(), "");
    EXPECT_NE(error_of([&] { train::run_training(fresh); }).find("is in use"), std::string::npos);
  }
  EXPECT_EQ(snapshot(root_ / "lk"), before) << "a refused run changed the directory";
  EXPECT_FALSE(fs::exists(root_ / "lk_new")) << "the lock's directories outlived it";
  auto r = resume_to("lk", 8);
  EXPECT_NO_THROW(train::run_training(r));
  EXPECT_FALSE(fs::exists(root_ / "lk" / "run.lock"));
}

TEST_F(TrainerTest, StateJsonIsCheckedFieldByField) {
  train_to("st", 6);
  const std::string good = slurp(root_ / "st" / "ckpt" / "state.json");
  auto expect_refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& says) {
    edit_state(root_ / "st", edit);
    const std::string e = error_of([&] { train::read_checkpoint_meta((root_ / "st").string()); });
    EXPECT_NE(e.find(says), std::string::npos) << e;
    EXPECT_NE(e.find("state.json"), std::string::npos) << e;
    std::ofstream(root_ / "st" / "ckpt" / "state.json") << good;
  };
  expect_refused([](auto& s) { s["iter"] = 7; }, "does not match its checksum");
  expect_refused([](auto& s) { s.erase("config"); }, "does not match its checksum");
  // Without the self-checksum (as a hand edit or an older writer leaves it), each field is still checked.
  auto legacy = [](int format, const std::function<void(nlohmann::json&)>& more) {
    return [format, more](nlohmann::json& s) {
      s["format"] = format;
      s.erase("state_crc32");
      s.erase("checksums");
      more(s);
    };
  };
  expect_refused(legacy(1, [](auto& s) { s.erase("config"); }), "\"config\" is missing");
  expect_refused(legacy(1, [](auto& s) { s["iter"] = "ten"; }), "\"iter\" is \"ten\", not an integer");
  expect_refused(legacy(1, [](auto& s) { s["iter"] = -1; }), "\"iter\" = -1 is outside");
  expect_refused(legacy(2, [](auto&) {}), "\"world\" is missing");
  expect_refused([](auto& s) { s["format"] = 9; }, "written by a newer parallm");
  expect_refused([](auto& s) { s["format"] = 1; }, "its format field is damaged");  // 3 -> 1 is one bit
  // A format-1 checkpoint (before checksums) still resumes.
  edit_state(root_ / "st", legacy(1, [](auto&) {}));
  auto r = resume_to("st", 8);
  EXPECT_NO_THROW(train::run_training(r));
}

TEST_F(TrainerTest, ResumingOnAnotherVocabularyIsRefused) {
  train_to("voc", 6);
  std::ofstream(root_ / "nine.txt") << std::string(500, 'a') + "bcdefghi";
  data::prepare_char_dataset((root_ / "nine.txt").string(), (root_ / "nine").string());
  const auto before = snapshot(root_ / "voc");
  auto r = tiny("voc");
  r.apply_overrides({"train.init_from=resume", "train.max_iters=8", "data.dir=" + (root_ / "nine").string()});
  const std::string e = error_of([&] { train::run_training(r); });
  EXPECT_NE(e.find("its vocabulary (9 characters) is not the one the run"), std::string::npos) << e;
  EXPECT_EQ(snapshot(root_ / "voc"), before);
}

TEST_F(TrainerTest, MetaJsonMustDescribeItsData) {
  const fs::path meta = root_ / "data" / "meta.json";
  const auto good = nlohmann::json::parse(slurp(meta));
  auto expect_refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& says) {
    auto m = good;
    edit(m);
    std::ofstream(meta) << m.dump();
    auto c = tiny("never");
    c.train.max_iters = 2;
    const std::string e = error_of([&] { train::run_training(c); });
    EXPECT_NE(e.find(says), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(root_ / "never")) << "the run directory was made for a dataset that was refused";
  };
  expect_refused([](auto& m) { m.erase("itos"); }, "has neither an itos list");
  expect_refused(
      [](auto& m) {
        m["bpe"] = {{"type", "BPE"}, {"vocab", 3}};
      },
      "the model has no vocab object or merges list");
  expect_refused([](auto& m) { m["itos"][3] = 42; }, "itos entry 42 (id 3) is not a string");
  expect_refused([](auto& m) { m["itos"][3] = "ab"; }, "itos entry \"ab\" (id 3) is not one character");
  expect_refused([](auto& m) { m["itos"][3] = m["itos"][4]; }, "(id 4) repeats id 3");
  expect_refused([](auto& m) { m["itos"].erase(m["itos"].size() - 1); }, "but its itos list has");
}

TEST_F(TrainerTest, AVocabSizeBelowTheDataIsRefusedAndPaddingIsNeverSampled) {
  const auto vocab = data::Vocab::load((root_ / "data").string());
  auto small = tiny("small");
  small.apply_overrides({"model.vocab_size=" + std::to_string(vocab.size() - 1)});
  EXPECT_NE(error_of([&] { train::run_training(small); }).find("is smaller than the dataset's vocabulary"),
            std::string::npos);
  auto padded = tiny("pad");
  padded.apply_overrides({"model.vocab_size=1000", "train.max_iters=2", "train.sample_tokens=50"});
  train::run_training(padded);
  model::GPT m(train::RunConfig::from_json(train::read_checkpoint_meta((root_ / "pad").string())["config"]).model, 1,
               32);
  train::load_checkpoint((root_ / "pad").string(), m, nullptr);
  // A barely trained model spreads its probability over all 1000 ids: without
  // the limit most draws would be padding.
  const auto out = train::generate(m, {0}, {300, 1.0f, 0, 7, vocab.size(), {}});
  for (int32_t t : out) ASSERT_LT(t, vocab.size());
  EXPECT_EQ(vocab.decode(out).find("\xEF\xBF\xBD"), std::string::npos);
}

TEST_F(TrainerTest, AFailedSaveLeavesNoTemporaryAndTheLastCheckpoint) {
  train_to("full", 6);
  const auto before = snapshot(root_ / "full" / "ckpt");
  std::string e;
  {
    const FileSizeLimit limit(4096);  // model.bin no longer fits
    e = error_of([&] {
      const auto c = tiny("full");
      model::GPT m(c.model, 1, c.model.block_size);
      optim::AdamW opt(m.layout(), {}, Device::cpu());
      train::save_checkpoint((root_ / "full").string(), m, opt, {}, c.to_json());
    });
  }
  EXPECT_NE(e.find("the partial ckpt.tmp was removed; the previous checkpoint is intact"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(root_ / "full" / "ckpt.tmp"));
  EXPECT_EQ(snapshot(root_ / "full" / "ckpt"), before);
}

// metrics.jsonl fills its disk during a resumed run: the run stops after that
// step with the file named, saves its state (with the records it could not
// write), leaves whole lines only, and resumes from where it stopped once
// there is room, every step's record in metrics.jsonl exactly once.
TEST_F(TrainerTest, ARecordThatCannotBeWrittenStopsTheRun) {
  auto c = tiny("rec");
  c.apply_overrides({"train.max_iters=6", "train.eval_interval=1000"});
  train::run_training(c);
  const fs::path metrics = root_ / "rec" / "metrics.jsonl";
  const auto limit = static_cast<rlim_t>(fs::file_size(root_ / "rec" / "ckpt" / "optim.bin") + 4096);
  {  // pad metrics.jsonl to within a few records of the limit
    std::ofstream pad(metrics, std::ios::app);
    const std::string line = "{\"kind\":\"pad\",\"step\":0,\"x\":\"" + std::string(200, 'x') + "\"}\n";
    for (auto size = fs::file_size(metrics); size + 1200 < limit; size += line.size()) pad << line;
  }
  std::string e;
  {
    const FileSizeLimit lim(limit);
    auto r = tiny("rec");
    r.apply_overrides({"train.init_from=resume", "train.max_iters=40", "train.eval_interval=1000"});
    e = error_of([&] { train::run_training(r); });
  }
  EXPECT_NE(e.find("cannot write " + metrics.string()), std::string::npos) << e;
  EXPECT_NE(e.find("the run stopped after iteration"), std::string::npos) << e;
  EXPECT_NE(e.find("is saved in"), std::string::npos) << e;
  const std::string text = slurp(metrics);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  for (size_t a = 0, b; (b = text.find('\n', a)) != std::string::npos; a = b + 1)
    EXPECT_TRUE(nlohmann::json::accept(text.substr(a, b - a))) << "a cut line";
  // The stop saved a step-numbered checkpoint (the best one stays the best).
  const int64_t at = train::choose_checkpoint((root_ / "rec").string(), nullptr)["iter"].get<int64_t>();
  EXPECT_GT(at, 6);
  EXPECT_TRUE(fs::exists(train::step_checkpoint((root_ / "rec").string(), at).path()));
  EXPECT_FALSE(fs::exists(root_ / "rec" / "ckpt.tmp"));
  // A resume with nothing left to train still writes the kept records, and
  // the next resume of the same checkpoint leaves them once.
  auto done = resume_to("rec", at - 1);
  EXPECT_NE(
      train::run_training(done).nothing_to_do.find("metrics records a full disk kept in the checkpoint are now in"),
      std::string::npos);
  auto r = tiny("rec");
  r.apply_overrides({"train.init_from=resume", "train.max_iters=40", "train.eval_interval=1000"});
  const auto s = train::run_training(r);
  EXPECT_EQ(s.first_iter, at);
  // Nothing lost: the records the full disk refused were kept in the checkpoint and written on resume.
  std::vector<int64_t> steps, want(41);
  for (const auto& j : records("rec", "train")) steps.push_back(j["step"]);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(steps, want);
}

}  // namespace
