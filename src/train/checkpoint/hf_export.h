// `parallm export --format hf` as a library call: a run's checkpoint written
// as a Hugging Face GPT-2 directory (hf/hf_gpt2.h). The output directory
// is new or empty, or, with `overwrite`, holds an earlier export: then the
// export files this one does not write (a BPE run's tokenizer files beside a
// character model, a pytorch_model.bin) are removed, each named, and files
// that are not an export's are kept. A non-empty directory without
// `overwrite` is refused naming what it holds, before anything is written
// (issue 44, B5: an export left an earlier export's vocab.json, merges.txt and
// tokenizer_config.json beside a 65-token model).
#pragma once
#include <string>

#include "hf/hf_llama.h"

namespace parallm::train {

struct HfExportOptions {
  bool latest = false;       // the newest intact checkpoint instead of the best (ckpt/)
  bool overwrite = false;    // replace an earlier export in the output directory
  hf::HfWriteOptions write;  // the Llama family: BF16 weights, shard size
};

// Exports run `run_dir`'s checkpoint (the one `parallm sample` takes, or
// the newest with o.latest) into `out`; returns the sentence saying what was
// written. ConfigError for an output directory that may not be written,
// IoError for a run without an intact checkpoint.
std::string export_run_hf(const std::string& run_dir, const std::string& out, const HfExportOptions& o);

// The check above, and the removal of an earlier export's files that an
// export with (`bpe`) or without tokenizer files does not rewrite. Returns
// the files removed ("" if none).
std::string prepare_export_dir(const std::string& out, bool overwrite, bool bpe);

}  // namespace parallm::train
