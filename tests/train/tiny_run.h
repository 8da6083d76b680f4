// A tiny character corpus and model config shared by the trainer tests (one
// process and data parallel), so both exercise the same run.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/prepare.h"

namespace parallm::test_util {

// Writes a 3000-word text to root/in.txt and prepares it into root/data.
inline void prepare_tiny_dataset(const std::filesystem::path& root) {
  std::string text;
  const char* words[] = {"to be ", "or not ", "that is ", "the question\n", "whether ", "tis nobler "};
  for (int i = 0; i < 3000; ++i) text += words[(i * 5 + i / 7) % 6];
  std::ofstream(root / "in.txt") << text;
  data::prepare_char_dataset((root / "in.txt").string(), (root / "data").string());
}

// Deletes run `out_dir`'s step-numbered checkpoints (ckpt-NNNNNNNN/, the
// state a run saves after its last iteration among them): a resume then takes
// the best ckpt/, saved at an evaluation, as the tests that damage, copy or
// redo from it want.
inline void keep_only_best_checkpoint(const std::filesystem::path& out_dir) {
  for (const auto& e : std::filesystem::directory_iterator(out_dir))
    if (e.path().filename().string().rfind("ckpt-", 0) == 0) std::filesystem::remove_all(e.path());
}

// 2 layers x 32 wide, batch 4, dropout 0.1, gas 2, eval and checkpoint every 6 iterations.
inline std::vector<std::string> tiny_run_overrides(const std::filesystem::path& root, const std::string& out) {
  return {"model.n_layer=2",
          "model.n_head=2",
          "model.n_embd=32",
          "model.block_size=32",
          "model.batch_size=4",
          "model.dropout=0.1",
          "train.eval_interval=6",
          "train.eval_iters=2",
          "train.log_interval=100",
          "train.sample_tokens=0",
          "train.progress=false",
          "train.always_save_checkpoint=true",
          "train.peak_flops=1e11",
          "optimizer.learning_rate=3e-3",
          "optimizer.warmup_iters=3",
          "optimizer.lr_decay_iters=12",
          "optimizer.gas=2",
          "data.dir=" + (root / "data").string(),
          "train.out_dir=" + (root / out).string()};
}

// PARALLM_FAULT_INF_GRAD=iters for the scope of a test: those iterations'
// reduced gradients get an inf (the trainer's overflow-handling hook).
struct InfGradAt {
  explicit InfGradAt(const char* iters) { ::setenv("PARALLM_FAULT_INF_GRAD", iters, 1); }
  ~InfGradAt() { ::unsetenv("PARALLM_FAULT_INF_GRAD"); }
  InfGradAt(const InfGradAt&) = delete;
  InfGradAt& operator=(const InfGradAt&) = delete;
};

}  // namespace parallm::test_util
