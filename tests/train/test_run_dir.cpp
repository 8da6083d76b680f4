// The run directory reads its own files (metrics.jsonl on resume) only as
// regular files: a FIFO there is an IoError naming it, not a blocked resume.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <optional>
#include <string>

#include "core/error.h"
#include "train/run_dir.h"

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
