// BPE dataset preparation: text files -> train.bin / val.bin (little-endian
// token ids: uint16 as nanoGPT's, uint32 where the vocabulary exceeds 65,536,
// as Llama 3's 128,256; data/loader.h) and meta.json (the dtype and the
// tokenizer itself, so the dataset and every run trained on it can encode and
// decode; data/vocab.h).
//
// Design: the input is a list of segments (a byte range of a file, starting
// a document or not, ending one or not), each split's segments written in
// order. A segment is read in chunks of about `chunk_bytes`, cut only where
// the pre-tokenizer cuts anyway, so the ids equal those of the segment encoded
// whole: after a "\n" between two printable ASCII characters, or before a
// space between two ASCII letters (no piece of GPT-2's, cl100k's / Llama 3's
// or Qwen2's pattern crosses either place, and no piece before it looks past
// it; a tokenizer with another pattern, or a prefix space, reads each segment
// whole). Chunks are encoded on `threads` threads, a batch at a time, and
// written in order; memory stays at a few chunks per thread whatever the
// input's size. Each output is written as <name>.new and renamed only when
// all three are complete.
//
// Two layouts:
//   split_text   nanoGPT's data/shakespeare/prepare.py: one text, the first
//                90% of its code points train, the rest val, each encoded
//                with encode_ordinary, no special token;
//   documents    nanoGPT's openwebtext/prepare.py, with files as documents:
//                each as Hugging Face's encode(add_special_tokens=True) has it
//                (the template's prefix, Llama 3's <|begin_of_text|>, before;
//                its suffix after), then <|endoftext|> (Llama 3:
//                <|end_of_text|>); the text itself by encode_ordinary (special
//                tokens' strings in it are plain text); val is the inputs' last
//                `val_fraction` of bytes, from a line start on (a fixed split).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/bpe.h"

namespace parallm::data {

struct BpeProgress {
  int64_t bytes_done = 0, bytes_total = 0, tokens = 0;
  double seconds = 0;
};

struct BpePrepareOptions {
  // meta.json's "tokenizer": "gpt2", "bpe" (another of GPT-2's kind), "tokenizer.json", "tiktoken"
  std::string tokenizer_name = "gpt2";
  int threads = 0;  // 0: every hardware thread
  int64_t chunk_bytes = int64_t{4} << 20;
  double val_fraction = 0.1;                         // documents only
  std::function<void(const BpeProgress&)> progress;  // after each batch
};

struct BpePrepareResult {
  int64_t bytes = 0, documents = 0, train_tokens = 0, val_tokens = 0;
  double seconds = 0;
};

BpePrepareResult prepare_bpe_split_text(const std::string& input, const std::string& out_dir, const Bpe& bpe,
                                        const BpePrepareOptions& o);
// `inputs`: files and directories (their regular files, recursively, in name order).
BpePrepareResult prepare_bpe_documents(const std::vector<std::string>& inputs, const std::string& out_dir,
                                       const Bpe& bpe, const BpePrepareOptions& o);

// Files and directories -> regular files (a directory's recursively, in name
// order); ConfigError naming an input that does not exist or holds no files.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);
// Calls fn with each file's text in chunks of about `chunk_bytes` cut as
// above, and where each is ("<file> (bytes a to b)").
void for_each_chunk(const std::vector<std::string>& files, int64_t chunk_bytes,
                    const std::function<void(std::string_view text, const std::string& where)>& fn);

// The ids of `text` encoded in chunks of about `chunk_bytes` cut as above
// (the same as bpe.encode_ordinary(text); exposed for tests).
std::vector<int32_t> encode_in_chunks(const Bpe& bpe, std::string_view text, int64_t chunk_bytes);
// The same ids, the chunks encoded on `threads` threads (0: every hardware thread).
std::vector<int32_t> encode_parallel(const Bpe& bpe, std::string_view text, int threads);

}  // namespace parallm::data
