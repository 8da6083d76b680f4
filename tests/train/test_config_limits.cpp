// Issue 30, the config side: every numeric key has a documented range that
// validate() checks; threads and model sizes are bounded by what this machine
// has, computed without allocating, before the run directory is touched;
// config files are one YAML document and regular files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>

#include "core/error.h"
#include "core/host.h"
#include "core/threads.h"
#include "model/params.h"
#include "train/config/config.h"
#include "train/config/plan.h"
#include "train/loop/trainer.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {
std::string validate_error(const std::vector<std::string>& kv) {
  train::RunConfig c;
  try {
    c.apply_overrides(kv);
    c.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

fs::path scratch_dir(const char* name) {
  const auto d = fs::temp_directory_path() / fmt::format("parallm_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(ConfigLimits, ThreadsAreBoundedByTheCoresThisProcessMayUse) {
  ASSERT_GE(usable_cores(), 1);
  EXPECT_EQ(max_threads(), kMaxThreadsPerCore * usable_cores());
  EXPECT_EQ(validate_error({fmt::format("train.threads={}", max_threads())}), "");
  const std::string e = validate_error({"train.threads=100000"});
  EXPECT_TRUE(has(e, "train.threads=100000 is out of range")) << e;
  EXPECT_TRUE(has(e, fmt::format("[0, {}]", max_threads()))) << e;
  EXPECT_TRUE(has(e, fmt::format("the {} core", usable_cores()))) << e;
  EXPECT_TRUE(has(validate_error({fmt::format("train.threads={}", max_threads() + 1)}), "train.threads")) << e;
  // The library's own backstop: libgomp is never asked for thousands of threads.
  EXPECT_THROW(set_num_threads(100000), ConfigError);
}

TEST(ConfigLimits, ModelSizesHaveUpperBounds) {
  EXPECT_TRUE(has(validate_error({"model.n_layer=2147483648"}), "model.n_layer must be in [1, 65536], got 2147483648"));
  EXPECT_TRUE(has(validate_error({"model.n_embd=2000000"}), "model.n_embd must be in [1, 1048576]"));
  EXPECT_TRUE(has(validate_error({"model.block_size=2000000"}), "model.block_size must be in [1, 1048576]"));
  EXPECT_TRUE(has(validate_error({"model.vocab_size=3000000000"}), "model.vocab_size must be in [1, 2147483647]"));
  EXPECT_TRUE(has(validate_error({"model.n_head=100000", "model.n_embd=100000"}), "model.n_head must be in"));
  const std::string e = validate_error({"model.batch_size=1048576", "model.block_size=1048576"});
  EXPECT_TRUE(has(e, "model.batch_size x model.block_size = 1048576 x 1048576")) << e;
}

// The closed form is the layout's count, and a lower bound of the planner's exact bytes.
TEST(ConfigLimits, TheMemoryEstimateIsAClosedFormLowerBound) {
  for (bool bias : {false, true})
    for (int64_t layers : {1, 3}) {
      model::GPTConfig m;
      m.n_layer = layers;
      m.n_head = 2;
      m.n_embd = 48;
      m.block_size = 16;
      m.vocab_size = 37;
      m.bias = bias;
      EXPECT_EQ(m.num_params(), static_cast<uint64_t>(model::ParamLayout(m).count()));
      for (int stage = 0; stage <= 3; ++stage) {
        train::PlanInput in;
        in.model = m;
        in.micro_batch = 3;
        in.seq_len = m.block_size;
        EXPECT_LE(static_cast<double>(train::min_run_bytes(m, 3, stage)), train::plan_memory(in, stage).total())
            << "stage " << stage;
      }
    }
  model::GPTConfig huge;
  huge.n_layer = INT64_MAX;  // saturates instead of wrapping
  huge.n_embd = INT64_MAX;
  EXPECT_EQ(huge.num_params(), UINT64_MAX);
  EXPECT_EQ(train::min_run_bytes(huge, INT64_MAX, 0), UINT64_MAX);
}

TEST(ConfigLimits, AModelLargerThanTheMachineIsRefusedAtOnce) {
  const auto t0 = std::chrono::steady_clock::now();
  // 65536 layers of width 8192: 5.3e13 parameters, 844 TB of training state.
  const std::string e = validate_error({"model.n_layer=65536", "model.n_embd=8192", "model.n_head=64"});
  EXPECT_TRUE(has(e, "model.n_layer=65536, model.n_embd=8192")) << e;
  EXPECT_TRUE(has(e, "need at least")) << e;
  EXPECT_TRUE(has(e, "but this machine has")) << e;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // Split over pipeline stages, the largest stage holds at least 1/pp of it: a model
  // about twice this machine's memory is refused whole and planned at pp 64.
  const uint64_t have = physical_memory_bytes();
  if (have > 0) {
    model::GPTConfig c;
    c.n_embd = 1024;
    c.n_head = 16;
    c.block_size = 8;
    c.n_layer = 1;
    const uint64_t per_layer = train::min_run_bytes(c, 1, 0);
    const auto layers = static_cast<int64_t>(std::max<uint64_t>(64, 2 * have / per_layer + 1));
    const std::vector<std::string> kv = {"model.n_layer=" + std::to_string(layers), "model.n_embd=1024",
                                         "model.n_head=16", "model.batch_size=1", "model.block_size=8"};
    EXPECT_TRUE(has(validate_error(kv), "need at least")) << layers << " layers";
    auto split = kv;
    split.push_back("parallel.pp=64");
    EXPECT_FALSE(has(validate_error(split), "need at least")) << layers << " layers over 64 stages";
  }
  // Sharded (ZeRO-3), the state is spread over the ranks: only the activations count here.
  EXPECT_FALSE(has(validate_error({"model.n_layer=64", "model.n_embd=8192", "model.n_head=64", "zero.stage=3",
                                   "model.batch_size=1", "model.block_size=8"}),
                   "need at least"));
}

TEST(ConfigLimits, EveryNumericKeyHasItsRangeInTheHelpAndItIsChecked) {
  int numeric = 0;
  for (const auto& [key, text] : train::RunConfig::describe()) {
    if (text.rfind("int", 0) != 0 && text.rfind("float", 0) != 0) continue;
    ++numeric;
    EXPECT_TRUE(has(text, " in [") || has(text, " in (")) << key << ": " << text;
  }
  EXPECT_GE(numeric, 30);
  const std::pair<std::string, std::string> bad[] = {
      {"train.eval_iters=2000000", "train.eval_iters must be in [1, 1000000], got 2000000"},
      {"train.log_interval=1e13", "train.log_interval must be in [1, 2147483646]"},
      {"train.eval_interval=0", "train.eval_interval must be in [1, "},
      {"train.max_iters=-1", "train.max_iters must be in [0, "},
      {"optimizer.gas=2000000", "optimizer.gas must be in [1, 1048576]"},
      {"comm.timeout_s=1e9", "comm.timeout_s must be in (0, 604800]"},
      {"ddp.bucket_mb=1e6", "ddp.bucket_mb must be in (0, 65536]"},
      {"ddp.shards=-1", "ddp.shards must be in [0, "},
      {"zero.prefetch=100000", "zero.prefetch must be in [0, 65536]"},
      {"train.loss_scale_window=3000000000", "train.loss_scale_window must be in [1, 2147483647]"},
      {"train.loss_scale_init=0.5", "train.loss_scale_init must be in [1, 2^64]"},
      {"train.sample_tokens=1000000", "train.sample_tokens must be in [0, 100000]"},
      {"train.top_k=3000000000", "train.top_k must be in [0, 2147483647]"},
      {"train.temperature=1000", "train.temperature must be in [0, 100]"},  // 0: the most likely token
      {"train.temperature=-0.5", "train.temperature must be in [0, 100]"},
      {"train.peak_flops=1e30", "train.peak_flops must be in [0, 1e+21]"},
      {"optimizer.learning_rate=1000", "optimizer.learning_rate must be in [0, 100]"},
      {"optimizer.eps=2", "optimizer.eps must be in (0, 1]"},
      {"optimizer.grad_clip=1e10", "optimizer.grad_clip must be in [0, 1000000000]"},
      {"model.dropout=1", "model.dropout must be in [0, 1)"}};
  for (const auto& [kv, want] : bad) {
    const std::string e = validate_error({kv});
    EXPECT_TRUE(has(e, want)) << kv << " -> " << e;
  }
  // A saved run's threads were this machine's choice: resuming elsewhere re-checks them, but they still load.
  train::RunConfig saved;
  saved.train.threads = 100000;
  EXPECT_NO_THROW(train::RunConfig::from_json(saved.to_json()));
}

TEST(ConfigLimits, TooLargeRunsLeaveNoRunDirectory) {
  const fs::path root = scratch_dir("limits");
  const std::vector<std::vector<std::string>> bad = {{"train.threads=100000"},
                                                     {"model.n_layer=2147483648"},
                                                     {"model.n_layer=65536", "model.n_embd=8192", "model.n_head=64"}};
  for (const auto& kv : bad) {
    train::RunConfig c;
    c.apply_overrides({"model.vocab_size=65", "train.out_dir=" + (root / "run").string(), "train.progress=false"});
    c.apply_overrides(kv);
    EXPECT_THROW(train::run_training(c), ConfigError) << kv[0];
    EXPECT_FALSE(fs::exists(root / "run")) << kv[0];
  }
  fs::remove_all(root);
}

TEST(ConfigLimits, ASecondYamlDocumentIsAnErrorNamingTheFile) {
  const fs::path dir = scratch_dir("multidoc");
  const std::string path = (dir / "c.yaml").string();
  std::ofstream(path) << "model:\n  n_layer: 2\n---\nmodel:\n  n_layer: 4\n";
  train::RunConfig c;
  try {
    c.load_file(path);
    ADD_FAILURE() << "the second document was ignored";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(has(e.what(), path + " holds 2 YAML documents")) << e.what();
  }
  std::ofstream(path) << "---\nmodel:\n  n_layer: 3\n";  // one document with its marker is fine
  train::RunConfig d;
  d.load_file(path);
  EXPECT_EQ(d.model.n_layer, 3);
  fs::remove_all(dir);
}

// A FIFO would block open() until a writer comes: it is refused by its type,
// never opened. If it were opened, the test unblocks the reader itself.
TEST(ConfigLimits, ConfigFilesThatAreNotRegularFilesAreRefusedWithTheirPath) {
  const fs::path dir = scratch_dir("fifo");
  const std::string fifo = (dir / "c.yaml").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto load_error = [](const std::string& path) {
    train::RunConfig c;
    try {
      c.load_file(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto pending = std::async(std::launch::async, load_error, fifo);
  if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets the blocked reader see end of file
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "load_file blocked on a FIFO";
  }
  const std::string e = pending.get();
  EXPECT_TRUE(has(e, "config file " + fifo + " is a FIFO (named pipe), not a YAML file")) << e;
  EXPECT_TRUE(has(load_error("/dev/null"), "config file /dev/null is a character device")) << load_error("/dev/null");
  EXPECT_TRUE(has(load_error(dir.string()), "is a directory")) << load_error(dir.string());
  EXPECT_TRUE(has(load_error((dir / "none.yaml").string()), "does not exist"));
  fs::remove_all(dir);
}
