// Dataset preparation (nanoGPT-compatible bytes) and the loader's sampling
// contract: batches depend only on (seed, step), ranks read slices of the
// same global batch.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/vocab.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {
fs::path tmpdir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("parallm_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}
void write(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}
std::vector<uint16_t> read_u16(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<uint16_t> v(b.size() / 2);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}
}  // namespace

TEST(Prepare, CodePointVocabularyAndNinetyTenSplit) {
  auto d = tmpdir("prep");
  // 10 code points, 3 of them multi-byte: the split counts code points, not bytes.
  write(d / "in.txt",
        "ba\xC3\xA9"
        "c\xE2\x82\xAC"
        "ab\xF0\x9F\x98\x80"
        "ca");
  auto r = data::prepare_char_dataset((d / "in.txt").string(), (d / "out").string());
  EXPECT_EQ(r.chars, 10);
  EXPECT_EQ(r.vocab_size, 6);  // a b c é € 😀 sorted by code point
  EXPECT_EQ(r.train_tokens, 9);
  EXPECT_EQ(r.val_tokens, 1);
  auto train = read_u16(d / "out" / "train.bin");
  std::vector<uint16_t> want{1, 0, 3, 2, 4, 0, 1, 5, 2};
  EXPECT_EQ(train, want);
  EXPECT_EQ(read_u16(d / "out" / "val.bin"), std::vector<uint16_t>{0});
  auto vocab = data::Vocab::load((d / "out").string());
  EXPECT_EQ(vocab.decode(vocab.encode("c\xE2\x82\xAC"
                                      "a")),
            "c\xE2\x82\xAC"
            "a");
  EXPECT_THROW(vocab.encode("z"), ConfigError);
  fs::remove_all(d);
}

TEST(Prepare, RejectsInvalidUtf8WithOffset) {
  auto d = tmpdir("utf8");
  write(d / "bad.txt", std::string("abc\xFF"
                                   "def"));
  try {
    data::prepare_char_dataset((d / "bad.txt").string(), (d / "out").string());
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("offset 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(data::prepare_char_dataset((d / "missing.txt").string(), (d / "out").string()), IoError);
  fs::remove_all(d);
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmpdir("loader");
    std::string text;
    for (int i = 0; i < 5000; ++i) text += static_cast<char>('a' + (i * 7 + i / 13) % 26);
    write(dir_ / "in.txt", text);
    data::prepare_char_dataset((dir_ / "in.txt").string(), dir_.string());
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LoaderTest, BatchesDependOnlyOnSeedAndStepAndTargetsAreShifted) {
  const int64_t B = 3, T = 16;
  data::Loader a(dir_.string(), 26, {B, T, 1, 0}, 42), b(dir_.string(), 26, {B, T, 1, 0}, 42);
  std::vector<int32_t> x1(B * T), y1(B * T), x2(B * T), y2(B * T);
  b.get(data::Split::Train, 3, 0, x2.data(), y2.data());  // order of calls must not matter
  a.get(data::Split::Train, 7, 0, x1.data(), y1.data());
  a.get(data::Split::Train, 3, 0, x1.data(), y1.data());
  EXPECT_EQ(x1, x2);
  EXPECT_EQ(y1, y2);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t + 1 < T; ++t) EXPECT_EQ(y1[r * T + t], x1[r * T + t + 1]);
  a.get(data::Split::Train, 4, 0, x2.data(), y2.data());
  EXPECT_NE(x1, x2);
  a.get(data::Split::Train, 3, 0, x2.data(), y2.data(), /*eval=*/true);
  EXPECT_NE(x1, x2);  // eval batches never coincide with training batches
}

TEST_F(LoaderTest, RanksReadSlicesOfTheSameGlobalBatch) {
  const int64_t b = 2, T = 8, world = 3, micro_steps = 2;
  data::Loader one(dir_.string(), 26, {b * world, T, 1, 0}, 5);
  for (int64_t m = 0; m < micro_steps; ++m) {
    std::vector<int32_t> gx(b * world * T), gy(b * world * T);
    one.get(data::Split::Train, 11, m, gx.data(), gy.data());
    for (int64_t r = 0; r < world; ++r) {
      data::Loader rank(dir_.string(), 26, {b, T, world, r}, 5);
      std::vector<int32_t> x(b * T), y(b * T);
      rank.get(data::Split::Train, 11, m, x.data(), y.data());
      EXPECT_TRUE(std::equal(x.begin(), x.end(), gx.begin() + r * b * T)) << "rank " << r << " micro " << m;
    }
  }
}

TEST_F(LoaderTest, RejectsTokensOutsideVocabAndTinySplits) {
  EXPECT_THROW(data::Loader(dir_.string(), 10, {2, 8, 1, 0}, 1), ConfigError);
  EXPECT_THROW(data::Loader(dir_.string(), 26, {2, 4000, 1, 0}, 1), ConfigError);
  EXPECT_THROW(data::Loader((dir_ / "nope").string(), 26, {2, 8, 1, 0}, 1), IoError);
}

// Python's strict UTF-8: overlong forms, surrogates and code points above
// U+10FFFF are errors, and a refused input leaves the dataset as it was.
TEST(Prepare, RejectsOverlongsSurrogatesAndOutOfRangeAndKeepsTheOldDataset) {
  auto d = tmpdir("utf8strict");
  write(d / "good.txt", "to be or not to be\n");
  data::prepare_char_dataset((d / "good.txt").string(), (d / "out").string());
  const auto train_before = read_u16(d / "out" / "train.bin");
  const std::pair<const char*, const char*> cases[] = {{"ab\xC0\x80"
                                                        "cd",
                                                        "overlong"},
                                                       {"ab\xE0\x80\x80", "overlong"},
                                                       {"ab\xED\xA0\x80", "surrogate (U+D800)"},
                                                       {"ab\xF5\x80\x80\x80", "above U+10FFFF"}};
  for (const auto& [bytes, want] : cases) {
    write(d / "bad.txt", bytes);
    try {
      data::prepare_char_dataset((d / "bad.txt").string(), (d / "out").string());
      ADD_FAILURE() << "accepted " << want;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("offset 2"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_u16(d / "out" / "train.bin"), train_before);
  EXPECT_EQ(data::decode_utf8("\xF0\x9F\x98\x80", "x"), std::vector<char32_t>{0x1F600});  // the largest form is fine
  EXPECT_THROW(data::prepare_char_dataset(d.string(), (d / "out").string()), IoError);    // a directory as input
  fs::remove_all(d);
}

TEST_F(LoaderTest, RefusesTokenFilesThatMetaJsonDoesNotDescribe) {
  // train.bin from another prepare, meta.json still the old one.
  std::vector<uint16_t> fewer(100, 1);
  std::ofstream(dir_ / "train.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(fewer.data()), static_cast<std::streamsize>(fewer.size() * 2));
  try {
    data::Loader(dir_.string(), 26, {2, 8, 1, 0}, 1);
    FAIL() << "accepted a train.bin of another size than meta.json says";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("train_tokens"), std::string::npos) << e.what();
  }
}

// A token file truncated under a running job (another prepare, a user's
// `truncate -s 0`) is an IoError naming it; through a memory map it was SIGBUS.
TEST_F(LoaderTest, TokenFileTruncatedWhileInUseIsAnIoErrorNamingIt) {
  const int64_t B = 2, T = 8;
  data::Loader loader(dir_.string(), 26, {B, T, 1, 0}, 1);
  std::vector<int32_t> x(B * T), y(B * T);
  loader.get(data::Split::Train, 0, 0, x.data(), y.data());
  const fs::path train = dir_ / "train.bin";
  const auto bytes = fs::file_size(train);
  fs::resize_file(train, 0);
  try {
    loader.get(data::Split::Train, 1, 0, x.data(), y.data());
    FAIL() << "read a truncated train.bin";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("[data.read] {} shrank from {} to 0 bytes while the run was using it: something truncated "
                          "or rewrote it; restore the dataset (or prepare it again) and resume from the last "
                          "checkpoint",
                          train.string(), bytes));
  }
  loader.get(data::Split::Val, 1, 0, x.data(), y.data());  // val.bin is intact
}

// train.bin, val.bin or meta.json that is not a regular file is refused by
// name at once (a FIFO blocked the open; a directory gave "No such device" or
// a stream error without the path).
TEST_F(LoaderTest, RefusesDataFilesThatAreNotRegularFiles) {
  auto expect_refused = [&](const std::string& file, const std::string& kind) {
    auto done = std::async(std::launch::async, [&]() -> std::string {
      try {
        data::Loader(dir_.string(), 26, {2, 8, 1, 0}, 1);
      } catch (const IoError& e) {
        return e.what();
      }
      return "(no error)";
    });
    if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      const int w = ::open((dir_ / file).c_str(), O_WRONLY | O_NONBLOCK);  // releases a blocked reader
      if (w >= 0) ::close(w);
      done.wait();
      FAIL() << "opening a dataset whose " << file << " is " << kind << " blocked";
    }
    const std::string msg = done.get();
    EXPECT_NE(msg.find((dir_ / file).string() + " is " + kind + ", not a regular file"), std::string::npos) << msg;
  };
  for (const char* file : {"train.bin", "val.bin", "meta.json"}) {
    const fs::path p = dir_ / file, saved = dir_ / (std::string(file) + ".saved");
    fs::rename(p, saved);
    ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0);
    expect_refused(file, "a FIFO (named pipe)");
    fs::remove(p);
    fs::create_directory(p);
    expect_refused(file, "a directory");
    fs::remove(p);
    fs::rename(saved, p);
  }
  EXPECT_NO_THROW(data::Loader(dir_.string(), 26, {2, 8, 1, 0}, 1));
}

// The hints for a missing dataset are sentences that name what to set.
TEST(Prepare, MissingOrUnsetDatasetSaysWhatToDo) {
  try {
    data::read_dataset_meta("");
    FAIL() << "read meta.json of an empty data.dir";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[data.meta] no dataset directory given (data.dir is empty): set data.dir to a prepared dataset, e.g. "
              "one made by `parallm prepare shakespeare_char --out data/shakespeare_char`");
  }
  const auto d = tmpdir("nometa");
  try {
    data::read_dataset_meta(d.string());
    FAIL() << "read a missing meta.json";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("[data.meta] no {}/meta.json: prepare the dataset first (`parallm prepare shakespeare_char "
                          "--out {}`), or set data.dir to a prepared dataset",
                          d.string(), d.string()));
  }
  fs::remove_all(d);
}
