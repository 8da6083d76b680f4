// A multilingual test text of a given size, the same bytes on every machine:
// paragraphs drawn by a fixed random sequence from tiny Shakespeare, and
// text made from Unicode ranges of many scripts (Latin with accents,
// Cyrillic, Greek, Arabic, Hebrew, Devanagari with its vowel signs, Thai,
// Chinese runs without spaces, Japanese kana, Korean, emoji with skin tones,
// ZWJ sequences and flags), numbers of every kind (ASCII, Arabic-Indic,
// full-width, superscripts, Roman numerals), code, contractions in every
// case, white space of every kind (tabs, CRLF, blank lines, NBSP, ideographic
// and em spaces, NEL, LS, U+180E, ZWSP, BOM), combining sequences that NFC
// composes, and the strings of special tokens, whole and cut.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/prepare.h"

namespace parallm::test_util {

class TextMaker {
 public:
  explicit TextMaker(uint64_t seed) : s_(seed) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  char32_t in(char32_t lo, char32_t hi) { return lo + static_cast<char32_t>(below(hi - lo + 1)); }
  std::string cp(char32_t c) { return data::encode_utf8(c); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

  // Words of `n` code points from [lo, hi], joined by spaces, with punctuation now and then.
  std::string words(char32_t lo, char32_t hi, size_t count, bool spaces = true) {
    std::string s;
    for (size_t w = 0; w < count; ++w) {
      const size_t len = 1 + below(9);
      for (size_t i = 0; i < len; ++i) s += cp(in(lo, hi));
      s += below(8) == 0 ? pick<std::string>({",", ".", "!", "?", ";", ":", " -", "\u060C", "\u3002"}) : "";
      if (spaces) s += " ";
    }
    return s;
  }

  std::string latin() {
    static const std::vector<std::string> extra = {"\u00e0", "\u00e2", "\u00e7", "\u00e9", "\u00e8", "\u00ea",
                                                   "\u00eb", "\u00ee", "\u00ef", "\u00f4", "\u00fb", "\u00f9",
                                                   "\u00fc", "\u00ff", "\u00f1", "\u00e4", "\u00f6", "\u00df",
                                                   "\u0142", "\u0107", "\u0161", "\u017e", "\u0151", "\u00c9"};
    std::string s;
    for (size_t w = 0, n = 5 + below(40); w < n; ++w) {
      const size_t len = 1 + below(11);
      for (size_t i = 0; i < len; ++i) {
        if (below(6) == 0) {
          s += pick(extra);
        } else {
          const char c = static_cast<char>('a' + below(26));
          s += below(10) == 0 || (i == 0 && below(4) == 0) ? static_cast<char>(c - 32) : c;
        }
      }
      s += below(7) == 0 ? pick<std::string>({",", ".", "!", "?", "...", ";", "\u00bb", "\u2014", ")"}) : "";
      s += " ";
    }
    return s + "\n";
  }

  std::string numbers() {
    std::string s;
    for (size_t w = 0, n = 3 + below(20); w < n; ++w) {
      switch (below(8)) {
        case 0:
          s += std::to_string(next() % 100000000);
          break;
        case 1:
          s += std::to_string(next() % 1000) + "." + std::to_string(next() % 100000);
          break;
        case 2:
          s += std::to_string(next() % 1000) + "," + std::to_string(100 + next() % 900) + ",000";
          break;
        case 3:
          s += words(0x0660, 0x0669, 1, false);
          break;  // Arabic-Indic digits
        case 4:
          s += words(0xFF10, 0xFF19, 1, false);
          break;  // full-width digits
        case 5:
          s += "x\u00b2+y\u00b3=\u00bd \u2168\u216b";
          break;  // No and Nl
        case 6:
          s += std::string("v") + std::to_string(next() % 10) + "." + std::to_string(next() % 100) + "rc1";
          break;
        default:
          s += std::string("$") + std::to_string(next() % 10000) + "%";
          break;
      }
      s += below(3) ? " " : "";
    }
    return s + "\n";
  }

  std::string code() {
    static const std::vector<std::string> lines = {"int main(int argc, char** argv) {",
                                                   "\tfor (size_t i = 0; i < n; ++i) x[i] += y[i];",
                                                   "    if (a != b && c->d) return -1;",
                                                   "def f(self, x=None, *args, **kw):",
                                                   "        return {\"key\": [1, 2, 3]}  # comment",
                                                   "  std::vector<std::string> v{\"a\", \"b\"};",
                                                   "}\n",
                                                   "\t\t// TODO(me): don't forget the edge-case",
                                                   "SELECT id, name FROM users WHERE age >= 18;",
                                                   "<div class=\"x\">&nbsp;</div>",
                                                   "    x = lambda y: y**2 if y else 0",
                                                   "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }"};
    std::string s;
    for (size_t i = 0, n = 2 + below(12); i < n; ++i) s += pick(lines) + (below(5) == 0 ? "\r\n" : "\n");
    return s;
  }

  std::string spaces() {
    static const std::vector<std::string> ws = {" ",      "  ",       "   ",    "\t",     "\n",     "\r\n",
                                                "\n\n",   " \n",      "\n\n\n", "\u00a0", "\u3000", "\u2003",
                                                "\u0085", "\u2028",   "\u180e", "\u200b", "\ufeff", "\t \t",
                                                "  \n  ", " \u00a0 ", "\u2009", "\u202f", "\x0b",   "\x0c"};
    std::string s;
    for (size_t i = 0, n = 5 + below(30); i < n; ++i) {
      s += below(3) ? pick<std::string>({"a", "word", "B", "x1", "!", "\u00e9t\u00e9", "\u4e2d", "--"}) : "";
      s += pick(ws);
    }
    return s + "\n";
  }

  std::string contractions() {
    static const std::vector<std::string> w = {
        "don't",   "DON'T",  "we'Ve",       "I'LL", "it's",    "It'S",     "they're", "THEY'RE", "I'm",     "you'd",
        "'\u017f", "O'Neil", "rock'n'roll", "'''",  "l'amour", "can't've", "'s",      "' s",     "\u2019s", "ma'am"};
    std::string s;
    for (size_t i = 0, n = 5 + below(20); i < n; ++i) s += pick(w) + " ";
    return s + "\n";
  }

  std::string specials() {
    static const std::vector<std::string> w = {"<|begin_of_text|>",
                                               "<|end_of_text|>",
                                               "<|eot_id|>",
                                               "<|start_header_id|>user<|end_header_id|>\n\n",
                                               "<|endoftext|>",
                                               "<|fim_prefix|>",
                                               "<|endofprompt|>",
                                               "<|im_start|>",
                                               "<|im_end|>",
                                               "<think>",
                                               "</think>",
                                               "<tool_call>",
                                               "<|end_of",
                                               "<|",
                                               "|>",
                                               "< |endoftext| >",
                                               "  <tool>x",
                                               "x </tool>  y",
                                               "a<tool>b",
                                               " xyzzy ",
                                               "xyzzyx",
                                               "axyzzy xyzzy."};
    std::string s;
    for (size_t i = 0, n = 2 + below(8); i < n; ++i) {
      std::string words = latin();
      size_t cut = std::min<size_t>(20, words.size());
      while (cut > 0 && (static_cast<unsigned char>(words[cut]) & 0xC0) == 0x80) --cut;  // a whole code point
      s += pick(w) + (below(2) ? " " : "") + words.substr(0, cut);
    }
    return s + "\n";
  }

  std::string combining() {
    static const std::vector<std::string> w = {
        "e\u0301", "a\u0308", "A\u030a",      "o\u0302\u0323", "\u1100\u1161", "\u1112\u1161\u11ab",
        "n\u0303", "c\u0327", "\u0915\u093c", "\u212b",        "\uff76\uff9e"};
    std::string s;
    for (size_t i = 0, n = 5 + below(20); i < n; ++i) s += pick(w) + (below(2) ? "x " : " ");
    return s + "\n";
  }

  std::string emoji() {
    std::string s;
    for (size_t i = 0, n = 3 + below(15); i < n; ++i) {
      switch (below(5)) {
        case 0:
          s += cp(in(0x1F600, 0x1F64F));
          break;
        case 1:
          s += cp(in(0x1F466, 0x1F469)) + cp(in(0x1F3FB, 0x1F3FF));
          break;
        case 2:
          s += "\U0001F468\u200D\U0001F469\u200D\U0001F467";
          break;
        case 3:
          s += "\U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5";
          break;
        default:
          s += "\u2764\uFE0F";
          break;
      }
      s += below(2) ? " " : "";
    }
    return s + "\n";
  }

  std::string scripts() {
    switch (below(10)) {
      case 0:
        return words(0x0430, 0x044F, 5 + below(30)) + "\n";  // Cyrillic
      case 1:
        return words(0x03B1, 0x03C9, 5 + below(30)) + "\n";  // Greek
      case 2:
        return words(0x0627, 0x064A, 5 + below(30)) + "\n";  // Arabic
      case 3:
        return words(0x05D0, 0x05EA, 5 + below(30)) + "\n";  // Hebrew
      case 4:
        return devanagari();  // with vowel signs
      case 5:
        return words(0x0E01, 0x0E2E, 1 + below(5), false) + "\n";  // Thai, no spaces
      case 6:
        return words(0x4E00, 0x9FA5, 1 + below(60), below(4) == 0) + "\n";  // Chinese runs
      case 7:
        return words(0x3041, 0x3093, 3 + below(10)) + words(0x30A1, 0x30F3, 3) + "\n";  // kana
      case 8:
        return words(0xAC00, 0xD7A3, 5 + below(20)) + "\n";  // Hangul
      default:
        return words(0x0100, 0x017F, 5 + below(20)) + "\n";  // Latin Extended-A
    }
  }

  std::string devanagari() {
    std::string s;
    for (size_t w = 0, n = 5 + below(20); w < n; ++w) {
      for (size_t i = 0, len = 1 + below(4); i < len; ++i) {
        s += cp(in(0x0915, 0x0939));
        if (below(2)) s += cp(in(0x093E, 0x094C));
        if (below(8) == 0) s += "\u094D";  // virama
      }
      s += below(6) == 0 ? "\u0964 " : " ";
    }
    return s + "\n";
  }

 private:
  uint64_t s_;
};

// `bytes` bytes (cut back to a code point boundary) from `seed`: paragraphs of
// tiny Shakespeare (`shakespeare`, cut at lines), `stress` whole now and then,
// and the made-up kinds above.
inline std::string multilingual_text(size_t bytes, const std::string& shakespeare, const std::string& stress,
                                     uint64_t seed = 46) {
  TextMaker m(seed);
  std::string s;
  while (s.size() < bytes) {
    switch (m.below(12)) {
      case 0:
      case 1: {
        if (shakespeare.size() < 4096) break;
        const size_t at = shakespeare.find('\n', m.below(shakespeare.size() - 4096)) + 1;
        const size_t end = shakespeare.find('\n', at + 200 + m.below(2000));
        s += shakespeare.substr(at, end - at + 1);
        break;
      }
      case 2:
        s += m.below(8) == 0 ? stress : m.latin();
        break;
      case 3:
        s += m.numbers();
        break;
      case 4:
        s += m.code();
        break;
      case 5:
        s += m.spaces();
        break;
      case 6:
        s += m.contractions();
        break;
      case 7:
        s += m.specials();
        break;
      case 8:
        s += m.combining();
        break;
      case 9:
        s += m.emoji();
        break;
      default:
        s += m.scripts();
        break;
    }
  }
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

}  // namespace parallm::test_util
