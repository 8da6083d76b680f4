// BPE dataset preparation (data/prepare_bpe.h) with a small hand-made
// tokenizer: chunked encoding gives the ids of the whole text, the files hold
// the documents and <|endoftext|> in order whatever the threads and chunk
// size, the splits are where the documentation says, meta.json carries the
// tokenizer, and bad input is refused naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/bpe_train.h"
#include "data/gpt2_files.h"
#include "data/prepare.h"
#include "data/prepare_bpe.h"
#include "data/small_bpe.h"
#include "data/vocab.h"
#include "train/error_of.h"

using namespace parallm;
using namespace parallm::data;
namespace fs = std::filesystem;

namespace {

using test_util::small_bpe;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<int32_t> ids_of(const fs::path& bin) {
  const std::string b = slurp(bin);
  std::vector<int32_t> ids(b.size() / 2);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<unsigned char>(b[2 * i]) | static_cast<unsigned char>(b[2 * i + 1]) << 8;
  return ids;
}

std::string corpus() {
  std::string s;
  const char* lines[] = {"The other thee,\n", "  whether 'tis nobler\n\n",   "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87\n",
                         "a  b   c\t\td\n",   "you'll ou\xF0\x9F\x91\x8B\n", "x\n"};
  for (int i = 0; i < 200; ++i) s += lines[(i * 5 + i / 3) % 6];
  return s;
}

class PrepareBpe : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("parallm_prepare_bpe_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "docs" / "sub");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  fs::path root_;
  Bpe bpe_ = small_bpe();
};

}  // namespace

TEST_F(PrepareBpe, ChunkedEncodingEqualsTheWholeText) {
  const std::string text = corpus();
  const auto whole = bpe_.encode_ordinary(text);
  for (int64_t chunk : {16, 37, 100, 1000, 100000}) EXPECT_EQ(encode_in_chunks(bpe_, text, chunk), whole) << chunk;
  // No safe place at all (one long line of one word): one chunk.
  const std::string word(5000, 'a');
  EXPECT_EQ(encode_in_chunks(bpe_, word, 16), bpe_.encode_ordinary(word));
}

TEST_F(PrepareBpe, DocumentsEndWithEndOfTextAndTheSplitIsFixed) {
  const std::string a = corpus(), b = "the end\n", c = corpus().substr(0, 3000);
  write(root_ / "docs" / "a.txt", a);
  write(root_ / "docs" / "sub" / "b.txt", b);
  write(root_ / "c.txt", c);
  BpePrepareOptions o;
  o.tokenizer_name = "bpe";
  o.val_fraction = 0.2;
  std::vector<std::string> outs;
  for (auto [threads, chunk] : {std::pair{1, int64_t{4} << 20}, std::pair{3, int64_t{16}}, std::pair{2, int64_t{64}}}) {
    o.threads = threads;
    o.chunk_bytes = chunk;
    const std::string out = (root_ / ("out" + std::to_string(threads))).string();
    const auto r = prepare_bpe_documents({(root_ / "docs").string(), (root_ / "c.txt").string()}, out, bpe_, o);
    EXPECT_EQ(r.documents, 3);
    EXPECT_EQ(r.bytes, static_cast<int64_t>(a.size() + b.size() + c.size()));
    outs.push_back(slurp(fs::path(out) / "train.bin") + "|" + slurp(fs::path(out) / "val.bin"));
  }
  EXPECT_EQ(outs[1], outs[0]) << "3 threads, 16-byte chunks";
  EXPECT_EQ(outs[2], outs[0]) << "2 threads, 64-byte chunks";
  const fs::path out = root_ / "out1";
  const auto train = ids_of(out / "train.bin"), val = ids_of(out / "val.bin");
  const int32_t eot = bpe_.end_of_text();
  // Files in name order (docs/a.txt, docs/sub/b.txt, then c.txt), each ended by <|endoftext|>.
  const std::string text = bpe_.decode(train) + bpe_.decode(val);
  const std::string eot_text = "<|endoftext|>";
  EXPECT_EQ(text, a + eot_text + b + eot_text + c + eot_text);
  EXPECT_EQ(val.back(), eot);
  // Val starts at a line start, at or after 80% of the bytes, within c.txt.
  const size_t val_at = bpe_.decode(train).size() - 2 * eot_text.size();  // in the inputs' bytes
  const size_t total = a.size() + b.size() + c.size();
  EXPECT_GE(val_at, static_cast<size_t>(0.8 * static_cast<double>(total)));
  EXPECT_EQ((a + b + c)[val_at - 1], '\n');
  // Each part encoded whole: ids equal the separate encodings of the pieces.
  auto expect = bpe_.encode_ordinary(a);
  expect.push_back(eot);
  for (int32_t i : bpe_.encode_ordinary(b)) expect.push_back(i);
  expect.push_back(eot);
  const size_t c_train = val_at - a.size() - b.size();
  for (int32_t i : bpe_.encode_ordinary(c.substr(0, c_train))) expect.push_back(i);
  EXPECT_EQ(train, expect);
  auto expect_val = bpe_.encode_ordinary(c.substr(c_train));
  expect_val.push_back(eot);
  EXPECT_EQ(val, expect_val);
  // meta.json: the counts and the tokenizer itself, which the dataset's Vocab is.
  const auto meta = read_dataset_meta(out.string());
  EXPECT_EQ(meta["train_tokens"], train.size());
  EXPECT_EQ(meta["val_tokens"], val.size());
  EXPECT_EQ(meta["tokenizer"], "bpe");
  EXPECT_EQ(meta["eot_token"], eot);
  const Vocab v = Vocab::load(out.string());
  ASSERT_TRUE(v.is_bpe());
  EXPECT_EQ(v.size(), bpe_.vocab_size());
  EXPECT_TRUE(*v.bpe() == bpe_);
  EXPECT_EQ(v.decode(v.encode("the end<|endoftext|>")), "the end<|endoftext|>");
  EXPECT_EQ(v.encode("x<|endoftext|>").back(), eot);
  EXPECT_EQ(v.describe(), "265 BPE tokens");
}

TEST_F(PrepareBpe, SplitTextCutsAtNinetyPercentOfTheCodePoints) {
  const std::string text = corpus();
  write(root_ / "in.txt", text);
  BpePrepareOptions o;
  o.chunk_bytes = 16;
  const auto r = prepare_bpe_split_text((root_ / "in.txt").string(), (root_ / "sh").string(), bpe_, o);
  const auto cps = decode_utf8(text, "corpus");
  const auto cut_cp = static_cast<size_t>(static_cast<double>(cps.size()) * 0.9);
  std::string train_text;
  for (size_t i = 0; i < cut_cp; ++i) train_text += encode_utf8(cps[i]);
  EXPECT_EQ(ids_of(root_ / "sh" / "train.bin"), bpe_.encode_ordinary(train_text));
  EXPECT_EQ(ids_of(root_ / "sh" / "val.bin"), bpe_.encode_ordinary(text.substr(train_text.size())));
  EXPECT_EQ(
      r.train_tokens + r.val_tokens,
      static_cast<int64_t>(fs::file_size(root_ / "sh" / "train.bin") + fs::file_size(root_ / "sh" / "val.bin")) / 2);
}

TEST_F(PrepareBpe, BadInputIsRefusedNamingTheFileAndLeavesTheDatasetAlone) {
  BpePrepareOptions o;
  o.chunk_bytes = 16;
  const std::string out = (root_ / "ds").string();
  write(root_ / "good.txt", corpus());
  prepare_bpe_documents({(root_ / "good.txt").string()}, out, bpe_, o);
  const std::string before = slurp(fs::path(out) / "train.bin") + slurp(fs::path(out) / "meta.json");
  std::string bad = corpus();
  bad[2000] = '\xff';
  write(root_ / "bad.txt", bad);
  auto e =
      test_util::error_of<ConfigError>([&] { prepare_bpe_documents({(root_ / "bad.txt").string()}, out, bpe_, o); });
  EXPECT_NE(e.find((root_ / "bad.txt").string() + " (bytes "), std::string::npos) << e;
  EXPECT_NE(e.find("UTF-8"), std::string::npos) << e;
  e = test_util::error_of<ConfigError>([&] { prepare_bpe_documents({(root_ / "nope").string()}, out, bpe_, o); });
  EXPECT_NE(e.find("nope does not exist"), std::string::npos) << e;
  fs::create_directories(root_ / "empty");
  e = test_util::error_of<ConfigError>([&] { prepare_bpe_documents({(root_ / "empty").string()}, out, bpe_, o); });
  EXPECT_NE(e.find("holds no files"), std::string::npos) << e;
  write(root_ / "one_line.txt", "no newline at all here");
  e = test_util::error_of<ConfigError>(
      [&] { prepare_bpe_documents({(root_ / "one_line.txt").string()}, out, bpe_, o); });
  EXPECT_NE(e.find("val split would be empty"), std::string::npos) << e;
  o.val_fraction = 1.5;
  e = test_util::error_of<ConfigError>([&] { prepare_bpe_documents({(root_ / "good.txt").string()}, out, bpe_, o); });
  EXPECT_NE(e.find("val_fraction 1.5"), std::string::npos) << e;
  EXPECT_EQ(slurp(fs::path(out) / "train.bin") + slurp(fs::path(out) / "meta.json"), before);
  EXPECT_FALSE(fs::exists(fs::path(out) / "train.bin.new"));
}

TEST_F(PrepareBpe, TrainedBpeIsDeterministicRoundTripsCompressesAndLoadsFromItsFiles) {
  std::string text = corpus();
  uint32_t x = 12345;  // and 2000 pseudo-random words of 2 to 7 letters: pairs enough for 43 merges
  for (int w = 0; w < 2000; ++w) {
    x = x * 1664525u + 1013904223u;
    text += ' ';
    for (uint32_t n = 2 + (x >> 29) % 6, i = 0; i < n; ++i) text += static_cast<char>('a' + ((x >> (3 * i)) % 7));
    if (w % 12 == 11) text += '\n';
  }
  write(root_ / "docs" / "a.txt", text);
  write(root_ / "docs" / "sub" / "b.txt", "the other thee\n");
  const auto r = train_bpe({(root_ / "docs").string()}, 300);
  EXPECT_EQ(r.bpe.vocab_size(), 300);
  EXPECT_EQ(r.bpe.end_of_text(), 299);
  EXPECT_GE(r.bpe.merges(), 43);
  EXPECT_EQ(r.bytes, static_cast<int64_t>(text.size() + 15));
  // A corpus with fewer pairs than asked for stops early: every piece is one token.
  write(root_ / "tiny.txt", "abab abab\n");
  const auto small = train_bpe({(root_ / "tiny.txt").string()}, 300);
  EXPECT_EQ(small.bpe.vocab_size(), 256 + 3 + 1);  // "ab", "abab", " abab", <|endoftext|>
  EXPECT_TRUE(train_bpe({(root_ / "docs").string()}, 300).bpe == r.bpe) << "training is not deterministic";
  const auto ids = r.bpe.encode_ordinary(text);
  EXPECT_EQ(r.bpe.decode(ids), text);
  EXPECT_LT(static_cast<double>(ids.size()), 0.8 * static_cast<double>(text.size())) << "it barely compresses";
  write_bpe_files(r.bpe, (root_ / "tok").string());
  const Bpe back = Bpe::load_dir((root_ / "tok").string());
  EXPECT_TRUE(back == r.bpe);
  EXPECT_EQ(back.encode_ordinary(text), ids);
  // Without merges to make: the bytes and <|endoftext|> only.
  EXPECT_EQ(train_bpe({(root_ / "docs" / "sub" / "b.txt").string()}, 257).bpe.vocab_size(), 257);
  EXPECT_NE(
      test_util::error_of<ConfigError>([&] { train_bpe({(root_ / "docs").string()}, 256); }).find("vocab_size 256"),
      std::string::npos);
  // Issue 44 U8: an empty input is refused by name (it "succeeded" with "-nan bytes a token").
  write(root_ / "empty.txt", "");
  const std::string e = test_util::error_of<ConfigError>([&] { train_bpe({(root_ / "empty.txt").string()}, 300); });
  EXPECT_NE(e.find("the input (" + (root_ / "empty.txt").string() +
                   ") holds no text (0 bytes): there is nothing "
                   "to train a tokenizer on"),
            std::string::npos)
      << e;
}

TEST_F(PrepareBpe, Gpt2FilesWhoseChecksumIsNotThePublishedOneAreRefused) {
  const fs::path cache = root_ / "gpt2-tokenizer";
  fs::create_directories(cache);
  write(cache / "encoder.json", "{\"a\": 0}");
  write(cache / "vocab.bpe", "#version: 0.2\n");
  const std::string e = test_util::error_of<IoError>([&] { gpt2_tokenizer("", cache.string()); });
  EXPECT_NE(e.find((cache / "encoder.json").string() + ": SHA-256 "), std::string::npos) << e;
  EXPECT_NE(e.find("is not that of GPT-2's published encoder.json (196139668be63f3b"), std::string::npos) << e;
  // Given with --vocab, any tokenizer is taken as it is (and is not GPT-2's).
  write_bpe_files(small_bpe(), (root_ / "mine").string());
  const Bpe mine = gpt2_tokenizer((root_ / "mine").string(), cache.string());
  EXPECT_TRUE(mine == small_bpe());
  EXPECT_FALSE(is_gpt2(mine));
}
