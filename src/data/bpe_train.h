// Byte-level BPE training (`parallm prepare bpe-train`), GPT-2's kind:
// GPT-2's pre-tokenizer cuts the corpus into pieces and their distinct byte
// strings are counted; from the 256 single bytes, the adjacent pair with the
// largest count over all pieces is merged into a new token, again and again,
// until the vocabulary holds vocab_size - 1 tokens; <|endoftext|> is the last
// id. Ties go to the pair whose tokens' bytes sort first, so one corpus always
// gives one tokenizer. As Hugging Face's trainer, a merge whose bytes are
// already a token adds no new one.
//
// Design: incremental counting. Each pair keeps its count and the pieces
// that hold it; a merge rewrites only those pieces, taking their old pairs'
// counts out and their new pairs' in. A max-heap of (count, pair) with stale
// entries skipped picks the next merge. The result is a data::Bpe, written
// as Hugging Face's vocab.json + merges.txt and tokenizer.json (which
// Hugging Face's tokenizers load), which Bpe::load_dir reads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/bpe.h"

namespace parallm::data {

struct BpeTrainResult {
  Bpe bpe;
  int64_t bytes = 0, pieces = 0, distinct = 0;  // of the corpus
  double count_seconds = 0, merge_seconds = 0;
};

// `vocab_size` at least 257 (the bytes and <|endoftext|>), at most 65536.
BpeTrainResult train_bpe(const std::vector<std::string>& files, int64_t vocab_size);

// dir/vocab.json, dir/merges.txt and dir/tokenizer.json (Hugging Face's formats).
void write_bpe_files(const Bpe& bpe, const std::string& dir);

}  // namespace parallm::data
