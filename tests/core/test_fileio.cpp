// core/fileio's readers, and the record files of core/append_file, accept
// only regular files: a FIFO, a directory, a device or a socket at a data,
// checkpoint or record path is an IoError naming the path and what it is, at
// once (a FIFO used to block the open forever). Record files keep whole
// records when a write fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>

#include "core/append_file.h"
#include "core/error.h"
#include "core/fileio.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {

fs::path scratch() {
  fs::path p = fs::temp_directory_path() / ("parallm_test_fileio_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Runs `read` and expects an IoError containing `want`. If it blocks (the fix
// reverted: a FIFO opened for reading waits for a writer), a writer is opened
// to release it and the test fails instead of hanging.
void expect_refused(const fs::path& path, const std::function<void()>& read, const std::string& want) {
  auto done = std::async(std::launch::async, [&]() -> std::string {
    try {
      read();
    } catch (const IoError& e) {
      return e.what();
    }
    return "(no error)";
  });
  if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    const int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    done.wait();
    FAIL() << "reading " << path << " blocked";
  }
  const std::string msg = done.get();
  EXPECT_NE(msg.find(path.string() + " is " + want + ", not a regular file"), std::string::npos) << msg;
}

void expect_all_readers_refuse(const fs::path& p, const std::string& want) {
  char buf[4];
  expect_refused(
      p, [&] { read_text_file(p.string(), "test"); }, want);
  expect_refused(
      p,
      [&] {
        read_file(p.string(), {{buf, sizeof(buf)}});
      },
      want);
  expect_refused(
      p, [&] { read_file_range(p.string(), 4, 0, buf, sizeof(buf)); }, want);
}

}  // namespace

TEST(FileIo, ReadersRefuseFifosDirectoriesDevicesAndSocketsByName) {
  const fs::path d = scratch();
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0644), 0);
  expect_all_readers_refuse(d / "fifo", "a FIFO (named pipe)");
  fs::create_directories(d / "dir");
  expect_all_readers_refuse(d / "dir", "a directory");
  expect_all_readers_refuse("/dev/null", "a character device");
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = (d / "sock").string();
  ASSERT_LT(sock.size(), sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  expect_all_readers_refuse(d / "sock", "a socket");
  ::close(s);
  fs::remove_all(d);
}

TEST(FileIo, ReadersReadRegularFilesAndNameMissingOnes) {
  const fs::path d = scratch();
  std::ofstream(d / "f", std::ios::binary) << "abcd";
  EXPECT_EQ(read_text_file((d / "f").string(), "test"), "abcd");
  char buf[4] = {};
  read_file((d / "f").string(), {{buf, 2}, {buf + 2, 2}});
  EXPECT_EQ(std::string(buf, 4), "abcd");
  read_file_range((d / "f").string(), 4, 1, buf, 2);
  EXPECT_EQ(std::string(buf, 2), "bc");
  try {
    read_text_file((d / "none").string(), "test");
    FAIL() << "read a missing file";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "[test] cannot read " + (d / "none").string() + ": No such file or directory");
  }
  fs::remove_all(d);
}

// A record file (metrics.jsonl, train.log) at a FIFO or a directory is refused
// by name; a FIFO must not block the open waiting for a reader.
TEST(FileIo, RecordFilesRefuseFifosAndDirectoriesByName) {
  const fs::path d = scratch();
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0644), 0);
  fs::create_directories(d / "dir");
  for (const auto& [name, want] : {std::pair{"fifo", "a FIFO (named pipe)"}, std::pair{"dir", "a directory"}}) {
    const fs::path p = d / name;
    auto done = std::async(std::launch::async, [&]() -> std::string {
      try {
        AppendFile f(p.string(), false, "test");
      } catch (const IoError& e) {
        return e.what();
      }
      return "(no error)";
    });
    if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      const int r = ::open(p.c_str(), O_RDONLY | O_NONBLOCK);  // releases a writer waiting on the FIFO
      done.wait();
      if (r >= 0) ::close(r);
      FAIL() << "opening " << p << " for records blocked";
    }
    const std::string msg = done.get();
    EXPECT_NE(msg.find(p.string() + " is " + want + ", not a regular file"), std::string::npos) << msg;
  }
  fs::remove_all(d);
}

// A record that cannot be written whole (here past a file size limit, as a
// full disk) leaves the file at its last whole record, and no later one lands.
TEST(FileIo, RecordFilesKeepWholeRecordsWhenAWriteFails) {
  const fs::path d = scratch();
  const std::string rec(100, 'r');
  {
    AppendFile f((d / "m").string(), true, "test");
    EXPECT_TRUE(f.append(rec.data(), rec.size()));
    rlimit old{};
    ::getrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 150;  // the second record would end at 200
    ::setrlimit(RLIMIT_FSIZE, &small);
    const bool second = f.append(rec.data(), rec.size());
    ::setrlimit(RLIMIT_FSIZE, &old);
    EXPECT_FALSE(second);
    EXPECT_FALSE(f.append("x\n", 2)) << "a record after a failure must not land";
    EXPECT_NE(f.error().find("cannot write " + (d / "m").string() + ": File too large"), std::string::npos)
        << f.error();
  }
  EXPECT_EQ(fs::file_size(d / "m"), rec.size());
  AppendFile again((d / "m").string(), false, "test");  // appending goes on after the whole records
  EXPECT_TRUE(again.append(rec.data(), rec.size()));
  EXPECT_EQ(fs::file_size(d / "m"), 2 * rec.size());
  fs::remove_all(d);
}
