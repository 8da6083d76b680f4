// Fuzz test of the config parser: mutations of a valid YAML config (random
// bytes, truncations, duplicated and removed lines, huge numbers, odd
// unicode, several documents, anchors and aliases, deep nesting) through
// RunConfig::load_file and validate, and random key=value overrides through
// apply_overrides and validate. Every case must end in success or in
// parallm's typed errors (ConfigError, IoError): no crash, no other
// exception. Fixed seeds, so a failure names the case that reproduces it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"
#include "train/config/config.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {

const char* const kValid =
    "model:\n"
    "  n_layer: 2\n"
    "  n_head: 2\n"
    "  n_embd: 32\n"
    "  block_size: 32\n"
    "  batch_size: 4\n"
    "  dropout: 0.1\n"
    "  bias: false\n"
    "train:\n"
    "  max_iters: 5\n"
    "  eval_iters: 2\n"
    "  progress: false\n"
    "  out_dir: /tmp/parallm_fuzz_out\n"
    "optimizer:\n"
    "  learning_rate: 1.0e-3\n"
    "  gas: 2\n"
    "ddp.bucket_mb: 4\n"
    "zero:\n"
    "  stage: 1\n";

const std::vector<std::string> kOdd = {"9223372036854775808",
                                       "-9223372036854775809",
                                       "1e308",
                                       "-1e400",
                                       "1e-400",
                                       "nan",
                                       "inf",
                                       "0x10",
                                       "1_000_000_000_000_000_000",
                                       "\xEF\xBF\xBD",
                                       "\xE2\x80\x8F",
                                       "\xF0\x9F\x98\x80",
                                       "\xC0\x80",
                                       "\xFF\xFE",
                                       std::string("\0", 1),
                                       "~",
                                       "[]",
                                       "{}",
                                       "&a 1",
                                       "*a",
                                       "!!binary AAAA",
                                       "? [1, 2]\n: 3",
                                       "|\n  text",
                                       "\"\\u0000\"",
                                       "'",
                                       "-",
                                       "2147483648",
                                       "4294967296"};

std::string pick(std::mt19937_64& rng, size_t n) {
  return std::to_string(std::uniform_int_distribution<size_t>(0, n - 1)(rng));
}

size_t below(std::mt19937_64& rng, size_t n) {
  return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1)
    v.push_back(s.substr(start, nl - start));
  if (start < s.size()) v.push_back(s.substr(start));
  return v;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

// One mutation of `text`, chosen by the generator.
std::string mutate(std::string text, std::mt19937_64& rng) {
  auto lines = lines_of(text);
  switch (below(rng, 10)) {
    case 0:  // random bytes
      for (size_t i = 0, n = 1 + below(rng, 8); i < n && !text.empty(); ++i)
        text[below(rng, text.size())] = static_cast<char>(below(rng, 256));
      return text;
    case 1:  // truncation
      return text.substr(0, below(rng, text.size() + 1));
    case 2:  // a duplicated line
      lines.insert(lines.begin() + static_cast<long>(below(rng, lines.size())), lines[below(rng, lines.size())]);
      return join(lines);
    case 3:  // a removed line
      lines.erase(lines.begin() + static_cast<long>(below(rng, lines.size())));
      return join(lines);
    case 4: {  // an odd value (huge numbers, unicode, YAML syntax) in place of one
      std::string& l = lines[below(rng, lines.size())];
      const size_t colon = l.find(':');
      if (colon != std::string::npos) l = l.substr(0, colon + 1) + " " + kOdd[below(rng, kOdd.size())];
      return join(lines);
    }
    case 5:  // a second document
      return text + (below(rng, 2) ? "---\n" : "...\n---\n") + (below(rng, 2) ? text : std::string("{}\n"));
    case 6:  // anchors and aliases, some recursive
      return text + "x: &anc\n  n_layer: 3\nmodel2: *anc\ny: &self [*self]\n" +
             (below(rng, 2) ? "z: *undefined\n" : "");
    case 7: {  // deep nesting, block or flow
      const size_t depth = 1 + below(rng, 3000);
      std::string deep;
      if (below(rng, 2)) {
        for (size_t i = 0; i < depth; ++i)
          deep += std::string(std::min<size_t>(i, 200), ' ') + "k" + pick(rng, 9) + ":\n";
      } else {
        deep = "model: " + std::string(depth, '[') + std::string(depth, ']') + "\n";
      }
      return below(rng, 2) ? deep : text + deep;
    }
    case 8:  // a random key of the table with a random value
      return text + "model.n_layer: " + kOdd[below(rng, kOdd.size())] + "\n";
    default:  // several mutations
      return mutate(mutate(text, rng), rng);
  }
}

// Runs `f`; a typed parallm error is an answer, anything else a failure.
void expect_typed(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const ConfigError&) {
  } catch (const IoError&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << typeid(e).name() << ": " << e.what();
  }
}

}  // namespace

TEST(ConfigFuzz, MutatedYamlFilesEndInTypedErrorsOrValidConfigs) {
  const fs::path dir = fs::temp_directory_path() / ("parallm_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "c.yaml").string();
  constexpr uint64_t kSeeds = 1500;
  int accepted = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    std::mt19937_64 rng(seed);
    const std::string text = mutate(kValid, rng);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    bool ok = false;
    expect_typed(
        [&] {
          train::RunConfig c;
          c.load_file(path);
          c.validate();
          ok = true;
        },
        "YAML seed " + std::to_string(seed));
    accepted += ok;
    if (HasFailure()) break;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("config fuzz: %llu YAML mutations (seeds 0..%llu) in %.2f s, %d accepted as valid\n",
              static_cast<unsigned long long>(kSeeds), static_cast<unsigned long long>(kSeeds - 1), s, accepted);
  EXPECT_GT(accepted, 0);  // some mutations leave a valid config
  EXPECT_LT(s, 30.0);
  fs::remove_all(dir);
}

TEST(ConfigFuzz, RandomOverridesEndInTypedErrorsOrValidConfigs) {
  std::vector<std::string> keys;
  for (const auto& [k, _] : train::RunConfig::describe()) keys.push_back(k);
  const std::string values[] = {"0", "1",     "-1",    "2",    "7",    "1e3",  "1e-3",   "0.5",  "true",   "off",
                                "",  "cuda",  "bf16",  "fp16", "mpi",  "auto", "resume", "none", "params", "3",
                                "4", "65536", "65537", "1e12", "1e13", "2^64", "=",      "a=b",  "\xFF",   "1_0"};
  constexpr uint64_t kSeeds = 3000;
  int accepted = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    std::mt19937_64 rng(1'000'000 + seed);
    std::vector<std::string> kv = {"model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=32"};
    for (size_t i = 0, n = 1 + below(rng, 4); i < n; ++i) {
      std::string v = below(rng, 4) ? values[below(rng, std::size(values))] : kOdd[below(rng, kOdd.size())];
      kv.push_back(keys[below(rng, keys.size())] + "=" + v);
    }
    if (below(rng, 20) == 0) kv.push_back(keys[below(rng, keys.size())]);  // no '='
    bool ok = false;
    expect_typed(
        [&] {
          train::RunConfig c;
          c.apply_overrides(kv);
          c.validate();
          ok = true;
        },
        "override seed " + std::to_string(seed));
    accepted += ok;
    if (HasFailure()) break;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("config fuzz: %llu override sets in %.2f s, %d accepted as valid\n",
              static_cast<unsigned long long>(kSeeds), s, accepted);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(s, 30.0);
}
