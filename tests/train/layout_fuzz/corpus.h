// The layout fuzzer's dataset: a small generated text (about 24,000
// characters of made-up words, capitals and punctuation), the same in every
// session, so a case's seed alone names its runs. Small, so `parallm train`
// starts in milliseconds (its loader scans the tokens once).
#pragma once
#include <string>

namespace layout_fuzz {

const std::string& corpus_text();
// Its distinct characters: the vocabulary `parallm prepare char` gives it.
int corpus_vocab();

}  // namespace layout_fuzz
