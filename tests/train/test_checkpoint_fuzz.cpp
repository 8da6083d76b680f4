// The checkpoint reader under random damage: truncated files, flipped bytes,
// deleted or retyped fields of state.json, in both formats (one file per
// part, and sharded). Every damaged checkpoint is refused with a parallm
// error, or loads exactly what was saved (damage that changed nothing, such as
// one blank swapped for another); no crash, no other exception, never a
// silently different model. Fixed seeds, bounded time.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "comm/communicator.h"
#include "core/error.h"
#include "model/gpt.h"
#include "train/checkpoint/checkpoint.h"
#include "train/config/config.h"

using namespace parallm;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void spit(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

struct Saved {
  std::vector<float> p, m, v;
  int64_t steps = 17;
  train::TrainState st{9, 2.5, std::nullopt};
};

// One kind of damage to one file of the checkpoint in `ck`, drawn from `rng`;
// returns what it did.
std::string damage(const fs::path& ck, std::mt19937& rng) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(ck)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  const fs::path f = files[rng() % files.size()];
  std::string bytes = slurp(f);
  const auto kind = rng() % 4;
  if (kind == 0 || bytes.empty()) {  // truncate
    const size_t n = bytes.empty() ? 0 : rng() % bytes.size();
    spit(f, bytes.substr(0, n));
    return fmt::format("{} cut to {} bytes", f.filename().string(), n);
  }
  if (kind == 1) {  // flip one byte
    const size_t at = rng() % bytes.size();
    bytes[at] = static_cast<char>(bytes[at] ^ static_cast<char>(1 + rng() % 255));
    spit(f, bytes);
    return fmt::format("{} byte {} flipped", f.filename().string(), at);
  }
  // Delete or retype a field of state.json, at the top or one level down.
  auto s = nlohmann::json::parse(slurp(ck / "state.json"));
  std::vector<nlohmann::json::json_pointer> ptrs;
  for (const auto& [k, v] : s.items()) {
    ptrs.emplace_back("/" + k);
    if (v.is_object())
      for (const auto& [k2, v2] : v.items()) ptrs.emplace_back("/" + k + "/" + k2);
    if (v.is_array() && !v.empty() && v[0].is_object())
      for (const auto& [k2, v2] : v[0].items()) ptrs.emplace_back("/" + k + "/0/" + k2);
  }
  const auto ptr = ptrs[rng() % ptrs.size()];
  if (kind == 2) {
    s[ptr.parent_pointer()].erase(ptr.back());
  } else {
    const nlohmann::json values[] = {nullptr, "x", -1, 1e300, nlohmann::json::array(), nlohmann::json::object(), 0};
    s[ptr] = values[rng() % 7];
  }
  spit(ck / "state.json", s.dump(1));
  return fmt::format("state.json {} {}", ptr.to_string(), kind == 2 ? "deleted" : "retyped");
}

TEST(CheckpointFuzz, DamageIsRefusedOrChangesNothing) {
  model::GPTConfig mc;
  mc.n_layer = 1;
  mc.n_head = 2;
  mc.n_embd = 8;
  mc.block_size = 4;
  mc.vocab_size = 7;
  model::GPT gpt(mc, 1, 4);
  const auto& layout = gpt.layout();
  const auto n = static_cast<size_t>(layout.total());
  Saved saved;
  std::mt19937 init(5);
  std::normal_distribution<float> normal;
  for (auto* buf : {&saved.p, &saved.m, &saved.v}) {
    buf->resize(n);
    for (auto& x : *buf) x = normal(init);
  }
  const fs::path root = fs::temp_directory_path() / ("parallm_ckfuzz_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const auto cfg = train::RunConfig().to_json();
  train::save_checkpoint((root / "single").string(), layout, saved.p.data(), saved.m.data(), saved.v.data(),
                         saved.steps, saved.st, cfg);
  auto self = comm::make_world("self");
  train::write_checkpoint(*self, (root / "sharded").string(), layout,
                          parallel::own_shards(*self, layout, {saved.p.data(), saved.m.data(), saved.v.data()}),
                          saved.steps, saved.st, cfg);
  const auto start = std::chrono::steady_clock::now();
  int refused = 0, unchanged = 0;
  constexpr int kSeeds = 3000;
  for (int seed = 0; seed < kSeeds; ++seed) {
    const std::string run = seed % 2 ? "sharded" : "single";
    const fs::path ck = root / run / "ckpt";
    std::map<fs::path, std::string> pristine;
    for (const auto& e : fs::directory_iterator(ck)) pristine[e.path()] = slurp(e.path());
    std::mt19937 rng(static_cast<uint32_t>(seed));
    const std::string what = damage(ck, rng);
    std::vector<float> p(n), m(n), v(n);
    int64_t steps = 0;
    try {
      const auto st = train::load_checkpoint((root / run).string(), layout, p.data(), m.data(), v.data(), &steps);
      ++unchanged;
      EXPECT_TRUE(p == saved.p && m == saved.m && v == saved.v && steps == saved.steps && st.iter == saved.st.iter &&
                  st.best_val_loss == saved.st.best_val_loss)
          << "seed " << seed << " (" << run << ", " << what << "): a damaged checkpoint loaded different values";
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "seed " << seed << " (" << run << ", " << what << "): not a parallm error: " << e.what();
    }
    for (const auto& [path, bytes] : pristine) spit(path, bytes);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("checkpoint fuzz: %d seeds in %.2f s: %d refused, %d loaded unchanged\n", kSeeds, secs, refused,
              unchanged);
  EXPECT_GT(refused, kSeeds * 9 / 10);
  fs::remove_all(root);
}

}  // namespace
