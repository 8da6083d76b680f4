// GPT-2's tokenizer files (encoder.json + vocab.bpe): where a network exists,
// `parallm prepare` fetches them from OpenAI's public store and checks their
// SHA-256 against the published files'; offline it takes --vocab DIR.
#pragma once
#include <string>

#include "data/bpe.h"

namespace parallm::data {

// The tokenizer in `vocab_dir` when given (any of Bpe::load_dir's formats);
// else GPT-2's encoder.json + vocab.bpe in `cache_dir`, downloaded there
// first when missing. IoError when a download fails (saying to pass --vocab
// DIR) or a file's SHA-256 is not the published one (naming both).
Bpe gpt2_tokenizer(const std::string& vocab_dir, const std::string& cache_dir);

// Whether `bpe` is GPT-2's (the same 50,257 tokens and 50,000 merges),
// whatever files it came from.
bool is_gpt2(const Bpe& bpe);

}  // namespace parallm::data
