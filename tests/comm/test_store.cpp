// FileStore: the rendezvous that starts NCCL without MPI. Values appear
// whole, a reader waits for a late writer, a missing key is a timeout naming
// the file, the job id keeps runs apart and comes from the scheduler, and the
// writer's keys are gone when it closes.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <string>
#include <thread>

#include "comm/store.h"
#include "core/error.h"

using namespace parallm;
using namespace parallm::comm;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("parallm_store_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* k) -> const char* {
    auto it = vars.find(k);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST(FileStore, ReaderWaitsForTheWriterAndSeesTheWholeValue) {
  const std::string dir = fresh_dir("wait");
  const std::string value(100000, 'x');
  FileStore reader(dir, "job1");
  std::promise<void> read;
  std::thread writer_thread([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    FileStore writer(dir, "job1");
    writer.set("nccl-world", value);
    read.get_future().wait();  // keeps the key until the reader has read it
  });
  std::string got;
  try {
    got = reader.get("nccl-world", 10.0);
  } catch (...) {  // the writer still waits for the read: release it, so the test fails instead of aborting
    read.set_value();
    writer_thread.join();
    throw;
  }
  read.set_value();
  writer_thread.join();
  EXPECT_EQ(got, value);
  EXPECT_FALSE(fs::exists(reader.path("nccl-world"))) << "the writer removes its keys as it closes";
  fs::remove_all(dir);
}

TEST(FileStore, JobsSharingADirectoryDoNotSeeEachOther) {
  const std::string dir = fresh_dir("jobs");
  FileStore a(dir, "1234.pbs-server"), b(dir, "5678");
  a.set("k", "from a");
  EXPECT_EQ(a.get("k", 1.0), "from a");
  EXPECT_THROW(b.get("k", 0.05), CommError);
  a.remove("k");
  EXPECT_FALSE(fs::exists(a.path("k")));
  fs::remove_all(dir);
}

TEST(FileStore, MissingKeyTimesOutNamingTheFile) {
  const std::string dir = fresh_dir("timeout");
  FileStore s(dir, "job");
  try {
    s.get("nccl-world", 0.1);
    FAIL() << "expected a timeout";
  } catch (const CommError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(s.path("nccl-world")), std::string::npos) << msg;
    EXPECT_NE(msg.find("PARALLM_STORE_DIR"), std::string::npos) << msg;
  }
  EXPECT_THROW(s.set("../escape", "x"), ConfigError);
  EXPECT_THROW(s.set("", "x"), ConfigError);
  fs::remove_all(dir);
}

TEST(FileStore, JobIdAndDirectoryComeFromTheEnvironment) {
  EXPECT_EQ(FileStore::from_env(env_of({})), nullptr);
  EXPECT_EQ(FileStore::job_id(env_of({{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "3"}})), "77.3");
  EXPECT_EQ(FileStore::job_id(env_of({{"PBS_JOBID", "12.server"}})), "12.server");
  EXPECT_EQ(FileStore::job_id(env_of({{"PARALLM_JOB_ID", "mine"}, {"PBS_JOBID", "12.server"}})), "mine");
  const std::string dir = fresh_dir("env");
  try {
    FileStore::from_env(env_of({{"PARALLM_STORE_DIR", dir}}));
    FAIL() << "expected an error: no job id";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PARALLM_JOB_ID"), std::string::npos) << e.what();
  }
  auto s = FileStore::from_env(env_of({{"PARALLM_STORE_DIR", dir}, {"PBS_JOBID", "12.server"}}));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(fs::path(s->path("k")).filename().string(), "parallm-12.server-k");
  EXPECT_THROW(FileStore(dir, "..."), ConfigError);
  fs::remove_all(dir);
}
