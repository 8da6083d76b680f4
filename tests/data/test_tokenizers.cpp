// The tokenizers beyond GPT-2's without the oracles (tests/data/test_bpe.cpp
// has GPT-2's; test_tokenizer_oracle.cpp compares with Hugging Face and
// tiktoken): the pre-tokenizers' pieces (PCRE2 against GPT-2's matcher,
// Llama 3's pattern, \s as White_Space), added tokens' flags, the template,
// ignore_merges, tiktoken's merge order, the heap for long pieces against a
// reference BPE, uint32 token files written and read back, and every refusal.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/bpe.h"
#include "data/bpe_train.h"
#include "data/loader.h"
#include "data/multilingual_text.h"
#include "data/prepare_bpe.h"
#include "data/tiktoken.h"
#include "data/vocab.h"
#include "test_paths.h"
#include "train/error_of.h"

using namespace parallm;
using namespace parallm::data;
namespace fs = std::filesystem;
using json = nlohmann::json;
using Pieces = std::vector<std::string>;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 200 KB of the multilingual test text (tiny Shakespeare where the shared data has it).
const std::string& text() {
  static const std::string t =
      test_util::multilingual_text(200000, slurp(fs::path(PARALLM_SHARED_DIR) / "data/tinyshakespeare/input.txt"),
                                   slurp(fs::path(test::test_dir()) / "data/utf8_stress.txt"));
  return t;
}

Pieces pieces(const Pretokenizer& p, const std::string& s) {
  std::vector<std::string_view> v;
  p.split(s, v);
  return Pieces(v.begin(), v.end());
}

// A byte-level tokenizer.json: the 256 bytes, the tokens and merges given (texts in GPT-2's alphabet), added tokens.
json tokenizer(const std::vector<std::pair<std::string, std::string>>& merges, json added = json::array()) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_printable(std::string(1, static_cast<char>(b)))] = b;
  json m = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = vocab.size();
    m.push_back({a, b});
  }
  return {{"added_tokens", std::move(added)},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(m)}}}};
}

json added(int id, const std::string& content, bool special = true) {
  return {{"id", id},        {"content", content}, {"special", special}, {"single_word", false},
          {"lstrip", false}, {"rstrip", false},    {"normalized", false}};
}

std::string error_of_json(const json& j) {
  try {
    Bpe::from_tokenizer_json(j, "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// The 256 single bytes as a rank file, ranks 0..255, then `more` (bytes, rank).
std::string rank_file(const std::vector<std::pair<std::string, int>>& more) {
  std::string s;
  for (int b = 0; b < 256; ++b)
    s += base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (const auto& [bytes, rank] : more) s += base64_encode(bytes) + " " + std::to_string(rank) + "\n";
  return s;
}

class TempDir {
 public:
  TempDir() : dir_(fs::temp_directory_path() / ("parallm_tokenizers_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
};

}  // namespace

TEST(Pretokenize, Pcre2GivesGpt2MatchersPiecesOnTheMultilingualText) {
  Pretokenizer hand, pcre;
  hand.add_gpt2();
  pcre.add_regex("(?:" + std::string(kGpt2Pattern) + ")", "GPT-2's pattern");  // not the same string: PCRE2
  EXPECT_EQ(pcre.patterns()[0], "(?:" + std::string(kGpt2Pattern) + ")");
  EXPECT_EQ(pieces(pcre, text()), pieces(hand, text()));
}

TEST(Pretokenize, Llama3PatternCutsContractionsDigitsAndNewlines) {
  Pretokenizer p;
  p.add_regex(tiktoken_encoding("cl100k_base").pattern, "cl100k");
  EXPECT_TRUE(p.cuts_like_gpt2());
  EXPECT_EQ(pieces(p, "DON'T stop 12345 a\n\n  b"),
            (Pieces{"DON", "'T", " stop", " ", "123", "45", " a", "\n\n", " ", " b"}));
  EXPECT_EQ(pieces(p, "it'\u017f \u4e2d\u6587\u4e2d\u6587!!\r\n"),
            (Pieces{"it", "'\u017f", " \u4e2d\u6587\u4e2d\u6587", "!!\r\n"}));  // (?i) folds the long s
  Pretokenizer o200k;
  o200k.add_regex(tiktoken_encoding("o200k_base").pattern, "o200k");
  EXPECT_FALSE(o200k.cuts_like_gpt2());  // ".\n/" is one of its pieces
}

TEST(Pretokenize, WhiteSpaceIsUnicodesWhiteSpace) {
  const std::string ws = R"(\t-\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  EXPECT_EQ(white_space_as_unicode(R"(\s+|[^\s\p{L}]|\S|\\s|\Q\s\E|[]\s])"),
            "[" + ws + "]+|[^" + ws + R"(\p{L}]|[^)" + ws + R"(]|\\s|\Q\s\E|[])" + ws + "]");
  Pretokenizer p;
  p.add_regex(R"(\s+|\S+)", "test");
  // U+180E is not White_Space (PCRE2's own \s has it); NEL U+0085 is.
  EXPECT_EQ(pieces(p, "a\u180eb\u0085c d"), (Pieces{"a\u180eb", "\u0085", "c", " ", "d"}));
  EXPECT_NE(test_util::error_of<ConfigError>([] {
              Pretokenizer bad;
              bad.add_regex("(unclosed", "the test's pattern");
            }).find("the test's pattern: the pattern (unclosed is not a regular expression PCRE2 takes"),
            std::string::npos);
}

TEST(AddedTokens, FlagsAsHuggingFaceHasThem) {
  AddedTokens t({{"<a>", 1000, false, false, true, false, false},
                 {"<b>", 1001, false, false, false, true, false},
                 {"ab", 1002, false, true, false, false, false}},
                false);
  std::vector<TextPart> parts;
  t.split("x  <a>y<b>  z ab cab ab.", false, parts);
  std::vector<std::pair<std::string, int>> got;
  for (const auto& p : parts) got.emplace_back(p.text, p.id);
  EXPECT_EQ(got, (std::vector<std::pair<std::string, int>>{{"x", -1},
                                                           {"  <a>", 1000},
                                                           {"y", -1},
                                                           {"<b>  ", 1001},
                                                           {"z ", -1},
                                                           {"ab", 1002},
                                                           {" cab ", -1},
                                                           {"ab", 1002},
                                                           {".", -1}}));
  parts.clear();
  t.split("x  <a>y", true, parts);  // none of them is matched on normalized text
  ASSERT_EQ(parts.size(), 1u);
}

TEST(TokenizerJson, TemplateAddedTokensAndIgnoreMerges) {
  // "hel" is a token that no merge makes: only ignore_merges gives it to the piece "hel".
  json j = tokenizer({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}},
                     json::array({added(300, "<|begin_of_text|>"), added(301, "<|end_of_text|>")}));
  j["model"]["vocab"]["hel"] = 260;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
      {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {300}}}}}}};
  const Bpe t = Bpe::from_tokenizer_json(j, "t.json");
  EXPECT_EQ(t.kind(), "tokenizer.json");
  EXPECT_EQ(t.vocab_size(), 302);  // ids 261..299 are holes
  EXPECT_EQ(t.end_of_text(), 301);
  EXPECT_EQ(t.template_prefix(), std::vector<int32_t>{300});
  EXPECT_EQ(t.encode_ordinary("hello hel"), (std::vector<int32_t>{259, ' ', 256, 'l'}));
  EXPECT_EQ(t.encode_ordinary("hel"), (std::vector<int32_t>{256, 'l'}));
  EXPECT_EQ(t.encode_with_template("hel<|end_of_text|>"), (std::vector<int32_t>{300, 256, 'l', 301}));
  EXPECT_EQ(t.decode({300, 259, 301}), "<|begin_of_text|>hello<|end_of_text|>");
  EXPECT_THROW(t.decode({280}), ConfigError);  // a hole
  j["model"]["ignore_merges"] = true;
  const Bpe whole = Bpe::from_tokenizer_json(j, "t.json");
  EXPECT_EQ(whole.encode_ordinary("hello hel"), (std::vector<int32_t>{259, ' ', 256, 'l'}));  // " hel" is no token
  EXPECT_EQ(whole.encode_ordinary("hel"), std::vector<int32_t>{260});
  EXPECT_TRUE(Bpe::from_definition(json::parse(whole.definition().dump()), "meta") == whole);
}

TEST(TokenizerJson, RefusesWhatItDoesNotTokenizeAsHuggingFace) {
  const json base = tokenizer({{"h", "e"}});
  const auto refused = [&](const std::function<void(json&)>& edit) {
    json j = base;
    edit(j);
    return error_of_json(j);
  };
  EXPECT_NE(refused([](json& j) { j["model"]["type"] = "WordPiece"; }).find("model of type \"WordPiece\""),
            std::string::npos);
  EXPECT_NE(refused([](json& j) {
              j["normalizer"] = {{"type", "Lowercase"}};
            }).find("normalizer of type \"Lowercase\""),
            std::string::npos);
  EXPECT_NE(refused([](json& j) {
              j["pre_tokenizer"] = {{"type", "Sequence"},
                                    {"pretokenizers",
                                     {{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Removed"}},
                                      {{"type", "ByteLevel"}}}}};
            }).find("pre_tokenizer 0 (Split) has behavior \"Removed\" (only Isolated)"),
            std::string::npos);
  EXPECT_NE(refused([](json& j) {
              j["pre_tokenizer"] = {{"type", "Metaspace"}};
            }).find("pre_tokenizer 0 (Metaspace) is not supported"),
            std::string::npos);
  EXPECT_NE(refused([](json& j) { j["pre_tokenizer"] = nullptr; }).find("pre_tokenizer is null"), std::string::npos);
  EXPECT_NE(refused([](json& j) { j["model"]["byte_fallback"] = true; }).find("model.byte_fallback"),
            std::string::npos);
  EXPECT_NE(refused([](json& j) { j["model"]["dropout"] = 0.1; }).find("model.dropout"), std::string::npos);
  EXPECT_NE(refused([](json& j) {
              j["decoder"] = {{"type", "Metaspace"}};
            }).find("decoder of type \"Metaspace\""),
            std::string::npos);
  EXPECT_NE(refused([](json& j) {
              j["post_processor"] = {{"type", "RobertaProcessing"}};
            }).find("post_processor of type \"RobertaProcessing\""),
            std::string::npos);
  EXPECT_NE(refused([](json& j) { j["added_tokens"] = {{{"content", "<x>"}}}; }).find("has no id"), std::string::npos);
  EXPECT_NE(refused([](json& j) { j["model"]["merges"].push_back("q z"); }).find("names a token that is not"),
            std::string::npos);
  EXPECT_NE(refused([](json& j) { j["model"]["vocab"]["\u4e2d"] = 999; }).find("not in the byte-level alphabet"),
            std::string::npos);
  // Every refusal of a feature is a ConfigError naming the file; a malformed file an IoError.
  EXPECT_THROW(Bpe::from_tokenizer_json(json::parse(R"({"model": {"type": "Unigram"}})"), "t.json"), ConfigError);
  TempDir d;
  std::ofstream(d.path() / "tokenizer.json") << "{\"model\": ";
  EXPECT_NE(test_util::error_of<IoError>([&] {
              Bpe::load((d.path() / "tokenizer.json").string());
            }).find("is not valid JSON"),
            std::string::npos);
}

TEST(Tiktoken, MergesByTheRankOfTheMergedBytesAndRefusesBadFiles) {
  // "bc" (256) before "ab" (257); "abc" (258) from a + bc; "abcd" is no token.
  const TiktokenEncoding enc{"", kGpt2Pattern, {{"<|endoftext|>", 300}}};
  const Bpe t = tiktoken_from_text(rank_file({{"bc", 256}, {"ab", 257}, {"abc", 258}}), enc, "ranks");
  EXPECT_EQ(t.kind(), "tiktoken");
  EXPECT_EQ(t.vocab_size(), 301);
  EXPECT_EQ(t.encode_ordinary("abcd"), (std::vector<int32_t>{258, 'd'}));
  EXPECT_EQ(t.encode_ordinary("xab"), (std::vector<int32_t>{'x', 257}));
  EXPECT_EQ(t.encode("ab<|endoftext|>bc"), (std::vector<int32_t>{257, 300, 256}));
  EXPECT_EQ(t.encode_ordinary("<|endoftext|>").size(), 13u);  // its bytes, which no merge joins
  EXPECT_TRUE(Bpe::from_definition(json::parse(t.definition().dump()), "meta") == t);
  std::string out;
  for (const std::string& s : {std::string(), std::string("a"), std::string("abc"), std::string("\xff\x00\x01", 3)}) {
    ASSERT_TRUE(base64_decode(base64_encode(s), out));
    EXPECT_EQ(out, s);
  }
  EXPECT_NE(test_util::error_of<IoError>([&] {
              tiktoken_from_text(rank_file({}) + "YWI= x\n", enc, "r.tiktoken");
            }).find("r.tiktoken line 257"),
            std::string::npos);
  EXPECT_NE(test_util::error_of<IoError>([&] {
              tiktoken_from_text(rank_file({{"ab", 7}}), enc, "r");
            }).find("rank 7 is given to two tokens"),
            std::string::npos);
  EXPECT_NE(test_util::error_of<IoError>([&] {
              tiktoken_from_text("YWI= 0\n", enc, "r");
            }).find("no token for the single byte 0x00"),
            std::string::npos);
  EXPECT_THROW(tiktoken_encoding("p99k"), ConfigError);
}

// The merges of a trained BPE, one piece at a time, against encoder.py's way (merge every occurrence of the
// lowest-ranked pair): pieces from 1 to 600 bytes, so both the array (up to 128) and the heap are used.
TEST(Bpe, LongAndShortPiecesMergeAsAReferenceBpe) {
  TempDir d;
  std::ofstream(d.path() / "corpus.txt", std::ios::binary) << text();
  const Bpe t = train_bpe({(d.path() / "corpus.txt").string()}, 700).bpe;
  std::map<std::pair<int32_t, int32_t>, int32_t> rank;
  const auto merges = t.merge_list();
  for (size_t r = 0; r < merges.size(); ++r) rank.emplace(merges[r], static_cast<int32_t>(r));
  std::map<std::string, int32_t> id_of;
  for (int32_t id = 0; id < t.vocab_size(); ++id) id_of[t.token_bytes(id)] = id;
  const auto reference = [&](const std::string& piece) {
    std::vector<std::string> sym;
    for (char c : piece) sym.emplace_back(1, c);
    for (;;) {
      int32_t best = INT32_MAX;
      for (size_t i = 0; i + 1 < sym.size(); ++i)
        if (const auto it = rank.find({id_of[sym[i]], id_of[sym[i + 1]]}); it != rank.end())
          best = std::min(best, it->second);
      if (best == INT32_MAX) break;
      std::vector<std::string> next;
      for (size_t i = 0; i < sym.size(); ++i) {
        const bool pair = i + 1 < sym.size() && rank.count({id_of[sym[i]], id_of[sym[i + 1]]}) &&
                          rank.at({id_of[sym[i]], id_of[sym[i + 1]]}) == best;
        next.push_back(pair ? sym[i] + sym[i + 1] : sym[i]);
        if (pair) ++i;
      }
      sym.swap(next);
    }
    std::vector<int32_t> ids;
    for (const auto& s : sym) ids.push_back(id_of.at(s));
    return ids;
  };
  test_util::TextMaker m(7);
  for (size_t len = 1; len <= 450; len += 1 + len / 6) {
    std::string piece, cjk;  // letters only: one piece each
    for (size_t i = 0; i < len; ++i) piece += "etaoinshrdlu"[m.below(m.below(2) ? 4 : 12)];
    for (size_t i = 0; i < len / 3 + 1; ++i) cjk += m.cp(m.in(0x4E00, 0x4E40));
    EXPECT_EQ(t.encode_ordinary(piece), reference(piece)) << len << " bytes";
    EXPECT_EQ(t.encode_ordinary(cjk), reference(cjk)) << cjk.size() << " bytes of CJK";
  }
}

// A vocabulary of more than 65,536 tokens: uint32 token files, read back by the loader; torn and unknown ones refused.
TEST(TokenFiles, Uint32PastSixtyFiveThousandTokens) {
  std::vector<std::pair<std::string, int>> pairs;
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b)
      pairs.push_back({std::string{static_cast<char>(a), static_cast<char>(b)}, 256 + a * 256 + b});
  const Bpe t =
      tiktoken_from_text(rank_file(pairs), {"", kGpt2Pattern, {{"<|endoftext|>", 256 + 65536}}}, "two-byte ranks");
  ASSERT_EQ(t.vocab_size(), 65793);
  TempDir d;
  const std::string doc = text().substr(0, text().find('\n', 20000) + 1);
  std::ofstream(d.path() / "doc.txt", std::ios::binary) << doc;
  const std::string out = (d.path() / "ds").string();
  BpePrepareOptions o;
  o.tokenizer_name = t.kind();
  o.threads = 2;
  const auto r = prepare_bpe_documents({(d.path() / "doc.txt").string()}, out, t, o);
  const json meta = json::parse(slurp(fs::path(out) / "meta.json"));
  EXPECT_EQ(meta["dtype"], "uint32");
  EXPECT_EQ(meta["tokenizer"], "tiktoken");
  const std::string train = slurp(fs::path(out) / "train.bin"), val = slurp(fs::path(out) / "val.bin");
  ASSERT_EQ(train.size(), static_cast<size_t>(r.train_tokens) * 4);
  std::vector<uint32_t> ids((train.size() + val.size()) / 4);
  std::memcpy(ids.data(), (train + val).data(), ids.size() * 4);
  // Train is the ids of the document up to the cut; the whole decodes to the document and <|endoftext|>.
  std::vector<int32_t> train_ids(ids.begin(), ids.begin() + r.train_tokens), all(ids.begin(), ids.end());
  EXPECT_EQ(t.decode(all), doc + "<|endoftext|>");
  EXPECT_EQ(train_ids, t.encode_ordinary(doc.substr(0, t.decode(train_ids).size())));
  EXPECT_EQ(Vocab::load(out).size(), 65793);
  // The loader's batches are the file's ids.
  BatchSpec spec;
  spec.batch_size = 2, spec.seq_len = 16;
  const Loader loader(out, t.vocab_size(), spec, 1);
  std::vector<int32_t> x(32), y(32);
  loader.get(Split::Train, 0, 0, x.data(), y.data());
  for (int b = 0; b < 2; ++b) {
    const auto at = std::search(ids.begin(), ids.end(), x.begin() + b * 16, x.begin() + b * 16 + 16);
    ASSERT_NE(at, ids.end()) << "row " << b << " is not a run of train.bin";
    EXPECT_EQ(static_cast<int32_t>(*(at + 16)), y[static_cast<size_t>(b * 16 + 15)]);
  }
  // A torn tail (not a whole uint32), and a dtype nobody writes.
  fs::resize_file(fs::path(out) / "val.bin", val.size() - 2);
  EXPECT_NE(test_util::error_of<IoError>([&] { Loader(out, t.vocab_size(), spec, 1); }).find("its tail is torn"),
            std::string::npos);
  fs::resize_file(fs::path(out) / "val.bin", val.size());
  json bad = meta;
  bad["dtype"] = "int8";
  std::ofstream(fs::path(out) / "meta.json") << bad.dump();
  EXPECT_NE(test_util::error_of<IoError>([&] { Loader(out, t.vocab_size(), spec, 1); }).find("dtype \"int8\""),
            std::string::npos);
}

// Documents inside the tokenizer's template (Llama 3's <|begin_of_text|>), then its end of text.
TEST(TokenFiles, DocumentsGetTheTemplateAndTheEndOfText) {
  json j = tokenizer({{"h", "e"}}, json::array({added(258, "<|begin_of_text|>"), added(259, "<|end_of_text|>")}));
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
      {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {258}}}}}}};
  const Bpe t = Bpe::from_tokenizer_json(j, "t.json");
  TempDir d;
  std::ofstream(d.path() / "a.txt") << "he said\nhe\n";
  std::ofstream(d.path() / "b.txt") << "the end\n";
  BpePrepareOptions o;
  o.tokenizer_name = t.kind();
  o.val_fraction = 0.5;  // a.txt train, b.txt val
  const std::string out = (d.path() / "ds").string();
  prepare_bpe_documents({(d.path() / "a.txt").string(), (d.path() / "b.txt").string()}, out, t, o);
  const std::string train = slurp(fs::path(out) / "train.bin"), val = slurp(fs::path(out) / "val.bin");
  EXPECT_EQ(json::parse(slurp(fs::path(out) / "meta.json"))["dtype"], "uint16");
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < train.size() + val.size(); i += 2) {
    const std::string& f = i < train.size() ? train : val;
    const size_t k = i < train.size() ? i : i - train.size();
    ids.push_back(static_cast<unsigned char>(f[k]) | static_cast<unsigned char>(f[k + 1]) << 8);
  }
  EXPECT_EQ(t.decode(ids), "<|begin_of_text|>he said\nhe\n<|end_of_text|><|begin_of_text|>the end\n<|end_of_text|>");
  const Vocab v = Vocab::load(out);
  EXPECT_TRUE(*v.bpe() == t);
}
