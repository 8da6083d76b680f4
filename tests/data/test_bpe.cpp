// GPT-2's byte-level BPE (data/bpe.h) without GPT-2's files: the pre-tokenizer
// on the pattern's corner cases (pieces as js-tiktoken cuts them, where the
// ids were checked), the merge order on a small hand-made vocabulary written
// in each file format, and the errors for malformed files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/bpe.h"
#include "data/prepare.h"
#include "train/error_of.h"

using namespace parallm;
using namespace parallm::data;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> pieces(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

using Pieces = std::vector<std::string>;

std::string printable(const std::string& bytes) {
  return gpt2_printable(bytes);
}

// A vocabulary of the 256 bytes and the merges of "hello", plus <|endoftext|>.
struct Files {
  fs::path dir;
  nlohmann::json vocab;
  std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}};
  Files() : dir(fs::temp_directory_path() / ("parallm_test_bpe_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (int b = 0; b < 256; ++b) vocab[printable(std::string(1, static_cast<char>(b)))] = b;
    int id = 256;
    for (const auto& [a, b] : merges) vocab[a + b] = id++;
    vocab["<|endoftext|>"] = id;
  }
  ~Files() { fs::remove_all(dir); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name, std::ios::binary) << text;
  }
  std::string merges_txt() const {
    std::string s = "#version: 0.2\n";
    for (const auto& [a, b] : merges) s += a + " " + b + "\n";
    return s;
  }
};

}  // namespace

TEST(Gpt2Pretokenize, WhiteSpaceRunsLeaveTheirLastCharacterToTheNextPiece) {
  EXPECT_EQ(pieces("Hello  world"), (Pieces{"Hello", " ", " world"}));
  EXPECT_EQ(pieces("Hello\n\nWorld"), (Pieces{"Hello", "\n", "\n", "World"}));
  EXPECT_EQ(pieces("a   \n\n  b"), (Pieces{"a", "   \n\n ", " b"}));
  EXPECT_EQ(pieces("trailing   "), (Pieces{"trailing", "   "}));
  EXPECT_EQ(pieces("  \tx"), (Pieces{"  ", "\t", "x"}));
  EXPECT_EQ(pieces(" "), (Pieces{" "}));
  EXPECT_EQ(pieces(""), (Pieces{}));
}

TEST(Gpt2Pretokenize, ContractionsAreLowerCaseAsciiOnly) {
  EXPECT_EQ(pieces("I'll don't we've 'S"), (Pieces{"I", "'ll", " don", "'t", " we", "'ve", " '", "S"}));
  EXPECT_EQ(pieces("x''s"), (Pieces{"x", "''", "s"}));
  EXPECT_EQ(pieces("it\u2019s"), (Pieces{"it", "\u2019", "s"}));  // U+2019 is punctuation
}

TEST(Gpt2Pretokenize, UnicodeLettersNumbersMarksAndSpaces) {
  EXPECT_EQ(pieces("h\u00e9llo \u4e16\u754c \u0661\u0662\u0663 \u00bd"),
            (Pieces{"h\u00e9llo", " \u4e16\u754c", " \u0661\u0662\u0663", " \u00bd"}));
  EXPECT_EQ(pieces("e\u0301x"), (Pieces{"e", "\u0301", "x"}));  // a combining mark is neither letter nor number
  EXPECT_EQ(pieces("hi \U0001F44B\U0001F3FD!"), (Pieces{"hi", " \U0001F44B\U0001F3FD!"}));
  EXPECT_EQ(pieces("a\u00a0b"), (Pieces{"a", "\u00a0", "b"}));  // NBSP is white space, but only U+0020 prefixes
  EXPECT_EQ(pieces("abc123def"), (Pieces{"abc", "123", "def"}));
}

TEST(Gpt2Pretokenize, RefusesInvalidUtf8) {
  EXPECT_THROW(gpt2_pretokenize("ok \xff"), ConfigError);
}

TEST(Bpe, MergesByRankInEveryFileFormat) {
  Files f;
  f.write("vocab.json", f.vocab.dump());
  f.write("merges.txt", f.merges_txt());
  const Bpe hf = Bpe::load_dir(f.dir.string());
  EXPECT_EQ(hf.vocab_size(), 261);
  EXPECT_EQ(hf.merges(), 4);
  EXPECT_EQ(hf.end_of_text(), 260);
  // "hellohe": he.l.l.o.he -> he.ll.o.he -> hell.o.he -> hello.he
  EXPECT_EQ(hf.encode_ordinary("hellohe"), (std::vector<int32_t>{259, 256}));
  EXPECT_EQ(hf.decode(hf.encode_ordinary("hellohe")), "hellohe");
  EXPECT_EQ(hf.encode("hello<|endoftext|>he"), (std::vector<int32_t>{259, 260, 256}));
  EXPECT_EQ(hf.encode_ordinary("<|endoftext|>").size(), 13u);  // plain text: one token per byte here

  fs::rename(f.dir / "vocab.json", f.dir / "encoder.json");
  fs::rename(f.dir / "merges.txt", f.dir / "vocab.bpe");
  EXPECT_EQ(Bpe::load_dir(f.dir.string()).encode_ordinary("hellohe"), (std::vector<int32_t>{259, 256}));

  nlohmann::json tok = {{"model", {{"type", "BPE"}, {"vocab", f.vocab}, {"merges", nlohmann::json::array()}}}};
  for (const auto& [a, b] : f.merges) tok["model"]["merges"].push_back({a, b});  // the pair form
  tok["model"]["merges"][0] = "h e";                                             // and the string form
  f.write("tokenizer.json", tok.dump());
  const Bpe t = Bpe::load_dir(f.dir.string());
  EXPECT_EQ(t.encode("hello<|endoftext|>he"), (std::vector<int32_t>{259, 260, 256}));
}

TEST(Bpe, EveryByteRoundTrips) {
  Files f;
  f.write("vocab.json", f.vocab.dump());
  f.write("merges.txt", f.merges_txt());
  const Bpe t = Bpe::load_dir(f.dir.string());
  const std::string text = "\t\n\r\x01 h\u00e9llo  \U0001F44B\u00a0\u3000x  ";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_THROW(t.decode({261}), ConfigError);
}

TEST(Bpe, MalformedFilesAreRefusedNamingTheEntry) {
  Files f;
  f.write("vocab.json", f.vocab.dump());
  f.write("merges.txt", "#version: 0.2\nh e\nl l x\n");
  EXPECT_NE(test_util::error_of<IoError>([&] { Bpe::load_dir(f.dir.string()); }).find("merges.txt line 3"),
            std::string::npos);
  f.write("merges.txt", "#version: 0.2\nh e\nq z\n");
  EXPECT_NE(test_util::error_of<IoError>([&] { Bpe::load_dir(f.dir.string()); }).find("merge 2 (\"q z\")"),
            std::string::npos);
  nlohmann::json v = f.vocab;
  v["he"] = 5;  // id 5 twice
  f.write("vocab.json", v.dump());
  f.write("merges.txt", f.merges_txt());
  EXPECT_NE(test_util::error_of<IoError>([&] { Bpe::load_dir(f.dir.string()); }).find("id 5 is given to two tokens"),
            std::string::npos);
  v = f.vocab;
  v.erase(printable(" "));
  v["<|endoftext|>"] = 32;  // keeps the ids contiguous
  f.write("vocab.json", v.dump());
  EXPECT_NE(
      test_util::error_of<IoError>([&] { Bpe::load_dir(f.dir.string()); }).find("no token for the single byte 0x20"),
      std::string::npos);
  f.write("vocab.json", "{\"a\": 0,");
  EXPECT_NE(test_util::error_of<IoError>([&] { Bpe::load_dir(f.dir.string()); }).find("is not valid JSON"),
            std::string::npos);
  fs::remove(f.dir / "vocab.json");
  EXPECT_NE(test_util::error_of<IoError>([&] { Bpe::load_dir(f.dir.string()); }).find("holds no GPT-2 tokenizer"),
            std::string::npos);
}

// GPT-2's real files against js-tiktoken's ids (tests/data/bpe_oracle.sh sets
// the environment; skipped without it).
TEST(Gpt2Oracle, IdsEqualJsTiktokenAndDecodeRoundTrips) {
  const char* dir = std::getenv("PARALLM_GPT2_FILES");
  const char* ids = std::getenv("PARALLM_GPT2_IDS");
  if (!dir || !ids) GTEST_SKIP() << "PARALLM_GPT2_FILES / PARALLM_GPT2_IDS not set (run by tests/data/bpe_oracle.sh)";
  const Bpe t = Bpe::load_dir(dir);
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.merges(), 50000);
  EXPECT_EQ(t.end_of_text(), 50256);
  std::ifstream in(ids);
  const nlohmann::json want = nlohmann::json::parse(in);
  for (const auto& [file, expected] : want.items()) {
    std::ifstream f(file, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::vector<int32_t> got = t.encode_ordinary(text);
    const auto exp = expected.get<std::vector<int32_t>>();
    size_t i = 0;
    while (i < got.size() && i < exp.size() && got[i] == exp[i]) ++i;
    const bool same = i == got.size() && i == exp.size();
    EXPECT_TRUE(same) << file << ": " << got.size() << " ids against js-tiktoken's " << exp.size()
                      << ", first difference at id " << i << " (after \""
                      << t.decode(std::vector<int32_t>(got.begin() + static_cast<long>(i > 8 ? i - 8 : 0),
                                                       got.begin() + static_cast<long>(i)))
                      << "\")";
    EXPECT_EQ(t.decode(got), text) << file;
    if (same)
      std::printf("bpe_oracle: %s: %zu bytes, %zu ids, equal to js-tiktoken's\n", file.c_str(), text.size(),
                  got.size());
  }
}
