#include "data/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "data/pretokenize.h"

namespace parallm::data {

namespace {

// The code point that starts at s[i] (valid UTF-8).
char32_t code_point_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return c;
  const size_t len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  char32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len && i + k < s.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// The start of the code point that ends at s[end - 1].
size_t code_point_before(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

size_t length_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

// Rust's char::is_whitespace (White_Space) and char::is_alphanumeric (Alphabetic or Nd, Nl, No).
bool is_space(char32_t c) {
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}
bool is_word(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  return u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(cp) & U_GC_N_MASK) != 0;
}

}  // namespace

AddedTokens::AddedTokens(std::vector<AddedToken> tokens, bool nfc) : tokens_(std::move(tokens)) {
  for (const auto& t : tokens_) {
    std::string m = t.content, normalized;
    if (t.normalized && nfc && nfc_if_needed(m, normalized)) m = normalized;
    match_.push_back(m);
  }
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    if (match_[i].empty()) continue;
    const int pass = tokens_[i].normalized ? 1 : 0;
    first_[pass][static_cast<unsigned char>(match_[i][0])].push_back(i);
    has_[pass] = true;
  }
  for (auto& pass : first_)
    for (auto& list : pass)
      std::stable_sort(list.begin(), list.end(),
                       [&](uint32_t a, uint32_t b) { return match_[a].size() > match_[b].size(); });
}

void AddedTokens::split(std::string_view text, bool normalized, std::vector<TextPart>& out) const {
  const int pass = normalized ? 1 : 0;
  const auto& first = first_[pass];
  size_t done = 0;  // the text before this is given out
  for (size_t p = 0; p < text.size();) {
    // The leftmost place at or after p where a token starts, and there the longest token.
    int64_t hit = -1;
    size_t at = p;
    for (; at < text.size() && hit < 0; ++at) {
      for (uint32_t i : first[static_cast<unsigned char>(text[at])]) {
        if (text.compare(at, match_[i].size(), match_[i]) == 0) {
          hit = i;
          break;
        }
      }
    }
    if (hit < 0) break;
    const size_t match_start = at - 1;
    const AddedToken& t = tokens_[static_cast<size_t>(hit)];
    size_t start = match_start, stop = match_start + match_[static_cast<size_t>(hit)].size();
    p = stop;  // the search goes on after the match, kept or not
    if (start < done) continue;
    if (t.single_word) {
      const bool word_before = start > 0 && is_word(code_point_at(text, code_point_before(text, start)));
      const bool word_after = stop < text.size() && is_word(code_point_at(text, stop));
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {
      while (start > done && is_space(code_point_at(text, code_point_before(text, start))))
        start = code_point_before(text, start);
    }
    if (t.rstrip) {
      while (stop < text.size() && is_space(code_point_at(text, stop))) stop += length_at(text, stop);
    }
    if (start > done) out.push_back({text.substr(done, start - done), -1});
    out.push_back({text.substr(start, stop - start), t.id});
    done = stop;
    p = std::max(p, stop);
  }
  if (done < text.size()) out.push_back({text.substr(done), -1});
}

}  // namespace parallm::data
