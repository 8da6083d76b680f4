// The generated corpus: words of 1-8 letters drawn with a fixed seed, a
// capital after each sentence's end, lines of about 60 characters. Every
// character of the alphabet below occurs, so the vocabulary is fixed.
#include "train/layout_fuzz/corpus.h"

#include <set>

#include "train/layout_fuzz/draw.h"

namespace layout_fuzz {

const std::string& corpus_text() {
  static const std::string text = [] {
    const std::string lower = "abcdefghijklmnopqrstuvwxyz", upper = "ABCDEFGHIJ", ends = ".!?", mids = ",;:";
    std::string t = upper + lower + ends + mids + "\n";  // every character at least once
    Rng r(20240044);
    bool capital = true;
    size_t line = 0;
    while (t.size() < 24000) {
      const int n = r.in(1, 8);
      for (int i = 0; i < n; ++i) {
        // A skewed choice (early letters more often), so the text has something to learn.
        const int k = std::min(r.below(26), r.below(26));
        t += capital && i == 0 ? upper[static_cast<size_t>(k % 10)] : lower[static_cast<size_t>(k)];
      }
      capital = false;
      if (r.chance(0.12)) {
        t += ends[static_cast<size_t>(r.below(3))];
        capital = true;
      } else if (r.chance(0.1)) {
        t += mids[static_cast<size_t>(r.below(3))];
      }
      if (t.size() - line > 60) {
        t += '\n';
        line = t.size();
      } else {
        t += ' ';
      }
    }
    return t;
  }();
  return text;
}

int corpus_vocab() {
  const std::string& t = corpus_text();
  return static_cast<int>(std::set<char>(t.begin(), t.end()).size());
}

}  // namespace layout_fuzz
