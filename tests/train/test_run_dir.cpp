// The run directory reads its own files (metrics.jsonl on resume) only as
// regular files: a FIFO there is an IoError naming it, not a blocked resume;
// what an interrupted save left is removed, saying what is left.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>

#include "core/error.h"
#include "train/records/run_dir.h"

using namespace parallm;
namespace fs = std::filesystem;

TEST(RunDir, ResumeRefusesAMetricsFileThatIsAFifo) {
  const fs::path d = fs::temp_directory_path() / ("parallm_test_run_dir_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  train::RunConfig cfg;
  cfg.train.out_dir = d.string();
  cfg.data.dir = (d / "no_data").string();
  const fs::path metrics = d / "metrics.jsonl";
  ASSERT_EQ(::mkfifo(metrics.c_str(), 0644), 0);
  auto done = std::async(std::launch::async, [&]() -> std::string {
    try {
      train::RunDir(cfg, train::RunDir::Mode::Resume, 1);
    } catch (const IoError& e) {
      return e.what();
    }
    return "(no error)";
  });
  if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    const int w = ::open(metrics.c_str(), O_WRONLY | O_NONBLOCK);  // releases a blocked reader
    if (w >= 0) ::close(w);
    done.wait();
    FAIL() << "resuming with a FIFO as metrics.jsonl blocked";
  }
  const std::string msg = done.get();
  EXPECT_NE(msg.find(metrics.string() + " is a FIFO (named pipe), not a regular file"), std::string::npos) << msg;
  fs::remove_all(d);
}

// Issue 44 U15: a stale <name>.tmp is removed saying which complete checkpoint of its slot is left, and that
// there is none when <name>/ does not exist (it said "the one in ckpt-N/" regardless).
TEST(RunDir, AStaleCheckpointTmpIsRemovedNamingWhatIsLeft) {
  const fs::path d = fs::temp_directory_path() / ("parallm_test_run_dir_tmp_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "ckpt-00000004.tmp");
  fs::create_directories(d / "ckpt.tmp");
  fs::create_directories(d / "ckpt");
  std::ofstream(d / "ckpt" / "state.json") << "{}";
  train::RunConfig cfg;
  cfg.train.out_dir = d.string();
  cfg.data.dir = (d / "no_data").string();
  { train::RunDir run(cfg, train::RunDir::Mode::Resume, 1); }
  EXPECT_FALSE(fs::exists(d / "ckpt-00000004.tmp"));
  EXPECT_FALSE(fs::exists(d / "ckpt.tmp"));
  std::ifstream in(d / "train.log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("removed " + (d / "ckpt-00000004.tmp").string() +
                     ": a checkpoint save that did not finish (a crash or a full disk) left it; there is no complete "
                     "ckpt-00000004/ (that save never finished)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("removed " + (d / "ckpt.tmp").string() +
                     ": a checkpoint save that did not finish (a crash or a full disk) left it; the last complete "
                     "checkpoint of that slot is the one in ckpt/"),
            std::string::npos)
      << log;
  fs::remove_all(d);
}
