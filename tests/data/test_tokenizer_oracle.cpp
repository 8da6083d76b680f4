// parallm's tokenizers against independent ones on a 1 MB multilingual text
// (tests/data/tokenizer_oracle.sh makes the text and the oracles' ids, and
// sets PARALLM_TOKENIZER_ORACLE; skipped without it): Hugging Face's
// tokenizers on Llama 3's, Llama 3.1's and Qwen3's tokenizer.json and on
// tokenizers that `parallm prepare bpe-train` wrote (ids of
// encode(add_special_tokens=True), and decode), js-tiktoken on cl100k_base
// and o200k_base rank files (encode_ordinary and encode with every special
// token allowed); decode gives the text back; the chunked and threaded
// encodings of prepare give the same ids; meta.json's form of each
// tokenizer, and its tokenizer.json, make it again.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/timer.h"
#include "data/bpe.h"
#include "data/prepare_bpe.h"
#include "data/tiktoken.h"

using namespace parallm;
using namespace parallm::data;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int32_t> read_ids(const std::string& path) {
  const std::string b = slurp(path);
  std::vector<int32_t> ids(b.size() / 4);
  std::memcpy(ids.data(), b.data(), ids.size() * 4);
  return ids;
}

// The manifest tokenizer_oracle.sh wrote, or null (the test skips).
nlohmann::json manifest() {
  const char* dir = std::getenv("PARALLM_TOKENIZER_ORACLE");
  if (!dir) return nullptr;
  return nlohmann::json::parse(slurp(std::string(dir) + "/manifest.json"));
}

// "" when equal, else where they first differ and the text around it.
std::string compare(const Bpe& t, const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return "";
  const auto around = [&](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t k = i > 6 ? i - 6 : 0; k < std::min(v.size(), i + 6); ++k)
      s += fmt::format("{}{}:{}", k == i ? " >>" : " ", v[k], t.token_text(v[k]));
    return s;
  };
  return fmt::format("{} ids against {}; first difference at id {}:\n  parallm{}\n  oracle {}", got.size(), want.size(),
                     i, around(got), around(want));
}

double mb_per_s(size_t bytes, double seconds) {
  return static_cast<double>(bytes) * 1e-6 / seconds;
}

// prepare's chunks (4 KB) and 2 threads give the ids of the whole text; meta.json's form of the tokenizer (and its
// tokenizer.json, where it is one) makes the same tokenizer, with the same ids on the first 100 KB.
void check_prepare_and_meta(const Bpe& t, const std::string& name, const std::string& text, bool meta) {
  const auto whole = t.encode_ordinary(text);
  EXPECT_EQ(encode_in_chunks(t, text, 4096), whole) << name;
  EXPECT_EQ(encode_parallel(t, text, 2), whole) << name;
  if (!meta) return;
  const Bpe again = Bpe::from_definition(nlohmann::json::parse(t.definition().dump()), name);
  EXPECT_TRUE(again == t) << name << ": meta.json's form makes another tokenizer";
  const std::string head = text.substr(0, text.find('\n', 100000));
  EXPECT_EQ(again.encode_with_template(head), t.encode_with_template(head)) << name;
  if (t.kind() != "tiktoken") {  // tiktoken's ranks are no merges list
    EXPECT_TRUE(Bpe::from_tokenizer_json(t.tokenizer_json(), name) == t) << name << ": its tokenizer.json";
  }
}

}  // namespace

TEST(TokenizerOracle, HuggingFaceTokenizersGiveTheSameIdsAndText) {
  const nlohmann::json m = manifest();
  if (m.is_null()) GTEST_SKIP() << "PARALLM_TOKENIZER_ORACLE not set (run by tests/data/tokenizer_oracle.sh)";
  const std::string text = slurp(m["text"]);
  for (const auto& c : m["hf"]) {
    const std::string name = c["name"];
    Timer load;
    const Bpe t = Bpe::load_tokenizer_json(c["tokenizer"]);
    const double load_s = load.seconds();
    Timer timer;
    const std::vector<int32_t> got = t.encode_with_template(text);
    const double s = timer.seconds();
    const std::string diff = compare(t, got, read_ids(c["ids"]));
    EXPECT_EQ(diff, "") << name;
    // Decoding: the oracle's text (Hugging Face's decode of the runs between added tokens, their contents between).
    EXPECT_EQ(t.decode(got), slurp(c["decoded"])) << name << ": decode differs from Hugging Face's";
    check_prepare_and_meta(t, name, text, c.value("deep", false));
    if (diff.empty())
      std::printf(
          "tokenizer_oracle: %s (%s, %d ids): %zu ids equal to Hugging Face tokenizers', decode equal; "
          "parallm %.2f MB/s, tokenizers %.2f MB/s (1 thread each); loaded in %.2f s\n",
          name.c_str(), t.kind().c_str(), t.vocab_size(), got.size(), mb_per_s(text.size(), s),
          mb_per_s(text.size(), c["seconds"].get<double>()), load_s);
  }
}

TEST(TokenizerOracle, TiktokenRankFilesGiveJsTiktokensIds) {
  const nlohmann::json m = manifest();
  if (m.is_null()) GTEST_SKIP() << "PARALLM_TOKENIZER_ORACLE not set (run by tests/data/tokenizer_oracle.sh)";
  for (const auto& c : m["tiktoken"]) {
    const std::string name = c["name"], text = slurp(c["text"]);  // without js-tiktoken's deviations
    const Bpe t = load_tiktoken(c["ranks"], tiktoken_encoding(name));
    Timer timer;
    const std::vector<int32_t> got = t.encode_ordinary(text);
    const double s = timer.seconds();
    const std::string diff = compare(t, got, read_ids(c["ordinary"]));
    EXPECT_EQ(diff, "") << name << " encode_ordinary";
    EXPECT_EQ(compare(t, t.encode(text), read_ids(c["all"])), "") << name << " encode, special tokens allowed";
    EXPECT_EQ(t.decode(got), text) << name;
    check_prepare_and_meta(t, name, text, name == "cl100k_base");
    if (diff.empty())
      std::printf(
          "tokenizer_oracle: %s: %zu ids equal to js-tiktoken's (and with special tokens), decode equal; "
          "parallm %.2f MB/s, js-tiktoken %.2f MB/s\n",
          name.c_str(), got.size(), mb_per_s(text.size(), s), mb_per_s(text.size(), c["seconds"].get<double>()));
  }
}
