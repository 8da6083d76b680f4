#include "train/loop/batch_skip.h"

#include "core/error.h"
#include "core/text.h"

namespace parallm::train {

namespace {

int64_t index_of(const std::string& key, const std::string& range, const std::string& v) {
  std::string s = v;
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  const auto i = to_int(s);
  PARALLM_CHECK(i, ConfigError, "config", "{}: \"{}\" is not a range of batch indices a:b (\"{}\" is not an integer)",
                key, range, v);
  PARALLM_CHECK(*i >= 0, ConfigError, "config", "{}: the range \"{}\" starts below batch 0", key, range);
  return *i;
}

}  // namespace

BatchSkip BatchSkip::parse(const std::string& key, const std::string& text) {
  BatchSkip b;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string range = text.substr(at, end - at);
    at = end + 1;
    const size_t colon = range.find(':');
    const int64_t lo = index_of(key, range, range.substr(0, colon));
    const int64_t hi = colon == std::string::npos ? lo : index_of(key, range, range.substr(colon + 1));
    PARALLM_CHECK(lo <= hi, ConfigError, "config", "{}: the range {}:{} ends before it starts", key, lo, hi);
    if (!b.ranges.empty()) {
      const auto [plo, phi] = b.ranges.back();
      PARALLM_CHECK(lo > phi, ConfigError, "config", "{}: the range {}:{} {} the range {}:{}; {}", key, lo, hi,
                    lo >= plo ? "overlaps" : "follows, but starts before,", plo, phi,
                    "give the ranges in ascending order, without overlaps");
    }
    b.ranges.emplace_back(lo, hi);
  }
  PARALLM_CHECK(text.empty() || text.back() != ',', ConfigError, "config", "{}: \"{}\" ends with a comma", key, text);
  return b;
}

std::string BatchSkip::text() const {
  std::string s;
  for (const auto& [a, b] : ranges) s += fmt::format("{}{}:{}", s.empty() ? "" : ",", a, b);
  return s;
}

int64_t BatchSkip::data_index(int64_t it) const {
  int64_t i = it;
  for (const auto& [a, b] : ranges) {
    if (a > i) break;
    i += b - a + 1;
  }
  return i;
}

void BatchSkip::check_reach(const std::string& key, int64_t max_iters) const {
  const int64_t last = data_index(max_iters);
  for (const auto& [a, b] : ranges)
    PARALLM_CHECK(a <= last, ConfigError, "config",
                  "{}: the range {}:{} lies past the last batch this run reads (batch {}, at train.max_iters={}): it "
                  "would skip nothing; raise train.max_iters or drop the range",
                  key, a, b, last, max_iters);
}

}  // namespace parallm::train
