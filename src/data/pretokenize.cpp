#include "data/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <cstring>

#include "core/error.h"

namespace parallm::data {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr const char* kPreWhere = "data.pretokenize";

// Patterns whose pieces are cut at prepare_bpe's chunk cuts anyway: cl100k's as Llama 3's tokenizer.json and
// tiktoken (before its possessive rewrite) write it, js-tiktoken's spelled-out form of it, and Qwen2's.
const char* const kCutsLikeGpt2[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"(('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

// Unicode's White_Space, as the inside of a character class.
constexpr const char* kWhiteSpace =
    R"(\t-\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// The classes of GPT-2's pattern: \s (Unicode White_Space), \p{L}, \p{N}, the rest.
enum class Cls : uint8_t { kSpace, kLetter, kNumber, kOther };

Cls class_of(char32_t c) {
  if (c < 0x80) {
    if (c == ' ' || (c >= '\t' && c <= '\r')) return Cls::kSpace;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Cls::kLetter;
    if (c >= '0' && c <= '9') return Cls::kNumber;
    return Cls::kOther;
  }
  const auto cp = static_cast<UChar32>(c);
  if (u_isUWhiteSpace(cp)) return Cls::kSpace;
  const uint32_t mask = U_GET_GC_MASK(cp);
  if (mask & U_GC_L_MASK) return Cls::kLetter;
  if (mask & U_GC_N_MASK) return Cls::kNumber;
  return Cls::kOther;
}

// One code point of valid UTF-8 at s[i]; its length in `len`.
char32_t next_code_point(std::string_view s, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return len = 1, c;
  len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  char32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// The length in code points of the contraction ('s 't 'm 'd 're 've 'll) at i, 0 if none.
size_t contraction_at(const std::vector<char32_t>& c, size_t i) {
  if (c[i] != '\'' || i + 1 >= c.size()) return 0;
  const char32_t a = c[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= c.size()) return 0;
  const char32_t b = c[i + 2];
  return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

// The end of the piece starting at code point i (the first alternative of the pattern that matches).
size_t piece_end(const std::vector<char32_t>& c, const std::vector<Cls>& k, size_t i) {
  const size_t n = c.size();
  if (const size_t len = contraction_at(c, i)) return i + len;
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional space, then a run of one class.
  size_t j = i + (c[i] == ' ' && i + 1 < n && k[i + 1] != Cls::kSpace ? 1 : 0);
  if (k[j] != Cls::kSpace) {
    const Cls run = k[j];
    while (j < n && k[j] == run) ++j;
    return j;
  }
  // "\s+(?!\S)|\s+": a run of white space; before a non-space, all but its last character
  // (which then leads the next piece), or that one character when the run is one long.
  j = i;
  while (j < n && k[j] == Cls::kSpace) ++j;
  if (j == n) return n;
  return j - i >= 2 ? j - 1 : i + 1;
}

// GPT-2's pieces of valid UTF-8, appended to out.
void gpt2_split(std::string_view text, std::vector<std::string_view>& out) {
  thread_local std::vector<char32_t> c;
  thread_local std::vector<Cls> k;
  thread_local std::vector<uint32_t> at;  // byte offset of each code point, and the end
  c.clear(), k.clear(), at.clear();
  for (size_t i = 0, len = 0; i < text.size(); i += len) {
    c.push_back(next_code_point(text, i, len));
    k.push_back(class_of(c.back()));
    at.push_back(static_cast<uint32_t>(i));
  }
  at.push_back(static_cast<uint32_t>(text.size()));
  for (size_t i = 0; i < c.size();) {
    const size_t end = piece_end(c, k, i);
    out.push_back(text.substr(at[i], at[end] - at[i]));
    i = end;
  }
}

// Each thread's PCRE2 match data (one pair: the whole match) and JIT stack.
struct ThreadMatch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadMatch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
  ThreadMatch(const ThreadMatch&) = delete;
  ThreadMatch& operator=(const ThreadMatch&) = delete;
};

}  // namespace

struct Pretokenizer::Level {
  bool gpt2 = false;
  std::string pattern;
  pcre2_code* code = nullptr;
  bool jit = false;
  Level() = default;
  Level(const Level&) = delete;
  Level& operator=(const Level&) = delete;
  ~Level() { pcre2_code_free(code); }
};

void check_utf8(std::string_view s, const std::string& what) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    if (i + 8 <= n) {  // eight ASCII bytes at once
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    const size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (ok && len == 3)
      ok = !(c == 0xE0 && p[i + 1] < 0xA0) && !(c == 0xED && p[i + 1] >= 0xA0);  // overlong, surrogate
    if (ok && len == 4) ok = !(c == 0xF0 && p[i + 1] < 0x90) && !(c == 0xF4 && p[i + 1] >= 0x90);  // overlong, > 10FFFF
    PARALLM_CHECK(ok, ConfigError, "data.utf8", "{} is not valid UTF-8: bad byte sequence at offset {} (byte 0x{:02x})",
                  what, i, c);
    i += len;
  }
}

bool nfc_if_needed(std::string_view text, std::string& out) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  PARALLM_CHECK(U_SUCCESS(err), InternalError, kPreWhere, "ICU has no NFC normalizer: {}", u_errorName(err));
  const icu::StringPiece sp(text.data(), static_cast<int32_t>(text.size()));
  if (nfc->isNormalizedUTF8(sp, err) && U_SUCCESS(err)) return false;
  err = U_ZERO_ERROR;
  out.clear();
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  nfc->normalizeUTF8(0, sp, sink, nullptr, err);
  PARALLM_CHECK(U_SUCCESS(err), ConfigError, kPreWhere, "NFC normalization failed: {}", u_errorName(err));
  return true;
}

std::string white_space_as_unicode(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 'Q') {  // \Q...\E: literal text, copied as it is
        const size_t end = p.find("\\E", i);
        const size_t stop = end == std::string::npos ? p.size() : end + 2;
        out.append(p, i - 1, stop - (i - 1));
        i = stop - 1;
      } else if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
      const size_t end = p.find(":]", i + 2);
      const size_t stop = end == std::string::npos ? i + 1 : end + 2;
      out.append(p, i, stop - i);
      i = stop - 1;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  check_utf8(text, "the text to tokenize");
  std::vector<std::string_view> pieces;
  gpt2_split(text, pieces);
  return pieces;
}

void Pretokenizer::add_gpt2() {
  auto l = std::make_shared<Level>();
  l->gpt2 = true;
  l->pattern = kGpt2Pattern;
  levels_.push_back(std::move(l));
}

void Pretokenizer::add_regex(const std::string& pattern, const std::string& what) {
  if (pattern == kGpt2Pattern) return add_gpt2();  // the hand-written matcher: the same pieces, faster
  auto l = std::make_shared<Level>();
  l->pattern = pattern;
  const std::string source = white_space_as_unicode(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  l->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &offset, nullptr);
  if (!l->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw ConfigError(kPreWhere, fmt::format("{}: the pattern {} is not a regular expression PCRE2 takes: {} (at {})",
                                             what, pattern, reinterpret_cast<const char*>(msg), offset));
  }
  l->jit = pcre2_jit_compile(l->code, PCRE2_JIT_COMPLETE) == 0;
  levels_.push_back(std::move(l));
}

std::vector<std::string> Pretokenizer::patterns() const {
  std::vector<std::string> out;
  for (const auto& l : levels_) out.push_back(l->pattern);
  return out;
}

bool Pretokenizer::cuts_like_gpt2() const {
  for (const auto& l : levels_) {
    bool known = l->gpt2;
    for (const char* p : kCutsLikeGpt2) known = known || l->pattern == p;
    if (!known) return false;
  }
  return true;
}

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (levels_.empty()) {
    if (!text.empty()) out.push_back(text);
    return;
  }
  split_level(0, text, out);
}

void Pretokenizer::split_level(size_t level, std::string_view text, std::vector<std::string_view>& out) const {
  const Level& l = *levels_[level];
  const bool last = level + 1 == levels_.size();
  const auto emit = [&](std::string_view piece) {
    if (last)
      out.push_back(piece);
    else
      split_level(level + 1, piece, out);
  };
  if (l.gpt2) {
    if (last) return gpt2_split(text, out);
    std::vector<std::string_view> pieces;
    gpt2_split(text, pieces);
    for (std::string_view p : pieces) emit(p);
    return;
  }
  thread_local ThreadMatch m;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
  size_t gap = 0;  // the start of the text not yet given
  for (size_t pos = 0; pos < text.size();) {
    const int rc = l.jit ? pcre2_jit_match(l.code, subject, text.size(), pos, 0, m.data, m.context)
                         : pcre2_match(l.code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, m.data, m.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    PARALLM_CHECK(rc >= 0, ConfigError, kPreWhere, "matching the pattern {} failed at byte {} (PCRE2 error {})",
                  l.pattern, pos, rc);
    const size_t start = ov[0], end = ov[1];
    if (end == start) {  // an empty match is no piece: go on from the next code point
      size_t len = 1;
      if (start >= text.size()) break;
      next_code_point(text, start, len);
      pos = start + len;
      continue;
    }
    if (start > gap) emit(text.substr(gap, start - gap));
    emit(text.substr(start, end - start));
    gap = pos = end;
  }
  if (gap < text.size()) emit(text.substr(gap));
}

}  // namespace parallm::data
