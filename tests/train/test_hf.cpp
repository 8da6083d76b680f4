// safetensors (hf/safetensors.h) and the Hugging Face GPT-2 directory
// (hf/hf_gpt2.h): files round-trip bitwise, every malformed file is
// refused with its own sentence, Conv1D weights are stored transposed, a
// tensor-parallel part reads the slice of the whole, and a run started with
// train.init_from=hf:DIR begins from exactly the exported weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "data/prepare_bpe.h"
#include "data/small_bpe.h"
#include "hf/hf_gpt2.h"
#include "hf/safetensors.h"
#include "model/gpt.h"
#include "test_paths.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/ckpt_dirs.h"
#include "train/checkpoint/hf_export.h"
#include "train/error_of.h"
#include "train/loop/trainer.h"
#include "train/tiny_run.h"

using namespace parallm;
using namespace parallm::train;
namespace fs = std::filesystem;

namespace {

class HfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("parallm_hf_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void put(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }
  // A dataset of `bpe`'s tokens in root_/bpe_data.
  void prepare_bpe_data(const data::Bpe& bpe) {
    std::string text;
    const char* lines[] = {"the other thee\n", "whether 'tis nobler in the mind\n", "to be or not to be\n"};
    for (int i = 0; i < 600; ++i) text += lines[(i * 7 + i / 5) % 3];
    put(root_ / "in.txt", text);
    data::BpePrepareOptions po;
    po.tokenizer_name = "bpe";
    data::prepare_bpe_documents({(root_ / "in.txt").string()}, (root_ / "bpe_data").string(), bpe, po);
  }
  // A file of the given header (padded as the writer pads) and `data` bytes.
  std::string file_of(std::string header, const std::string& data) {
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(header.size() >> (8 * i));
    return out + header + data;
  }
  fs::path root_;
};

model::GPTConfig tiny_gpt(bool bias) {
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 24;
  c.vocab_size = 70;
  c.bias = bias;
  c.gelu = kernels::GeluKind::Tanh;
  return c;
}

std::vector<float> random_params(const model::ParamLayout& l, unsigned seed) {
  std::vector<float> p(static_cast<size_t>(l.total()));
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, 0.5f);
  for (auto& x : p) x = d(g);
  return p;
}

}  // namespace

TEST_F(HfTest, SafetensorsRoundTripBitwiseWithPaddedHeaderAndMetadata) {
  const std::vector<float> a = {1.5f, -0.0f, 3e-39f, 7.25f, -1e30f, 0.1f}, b = {42.0f};
  const fs::path p = root_ / "x.safetensors";
  hf::write_safetensors(p.string(), {{"b", {1}, b.data()}, {"a", {2, 3}, a.data()}, {"empty", {0, 4}, nullptr}},
                        {{"who", "parallm"}});
  const std::string bytes = slurp(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data does not start 8-aligned";
  EXPECT_EQ(bytes[8], '{');
  const hf::SafetensorsReader r(p.string());
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.metadata().at("who"), "parallm");
  ASSERT_EQ(r.tensors().size(), 3u);
  const hf::StTensor* ta = r.find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> back(6);
  r.read(*ta, back.data());
  EXPECT_EQ(std::memcmp(back.data(), a.data(), 24), 0);
  EXPECT_EQ(r.find("empty")->numel(), 0);
}

TEST_F(HfTest, SafetensorsHalfFormatsReadAsFloat) {
  // F16 1.0, -2.0, the smallest subnormal, inf; BF16 1.0 and -3.0.
  const std::string f16("\x00\x3c\x00\xc0\x01\x00\x00\x7c", 8), bf16("\x80\x3f\x40\xc0", 4);
  put(root_ / "h.safetensors",
      file_of(R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],)"
              R"("data_offsets":[8,12]}})",
              f16 + bf16));
  const hf::SafetensorsReader r((root_ / "h.safetensors").string());
  std::vector<float> h(4), b(2);
  r.read(*r.find("h"), h.data());
  r.read(*r.find("b"), b.data());
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(h[3]));
  EXPECT_EQ(b, (std::vector<float>{1.0f, -3.0f}));
}

TEST_F(HfTest, MalformedSafetensorsAreRefusedEachWithItsOwnSentence) {
  const std::string four(16, '\x01');
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  auto refused = [&](const std::string& bytes) {
    put(root_ / "bad.safetensors", bytes);
    return test_util::error_of<IoError>([&] { hf::SafetensorsReader r((root_ / "bad.safetensors").string()); });
  };
  put(root_ / "good.safetensors", file_of(ok, four));
  EXPECT_NO_THROW({ hf::SafetensorsReader good((root_ / "good.safetensors").string()); });
  EXPECT_NE(refused("1234").find("too short"), std::string::npos);
  EXPECT_NE(refused(std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}").find("over 100 MB"), std::string::npos);
  EXPECT_NE(refused(std::string("\x40\x00\x00\x00\x00\x00\x00\x00", 8) + "{}").find("truncated, or not"),
            std::string::npos);
  EXPECT_NE(refused(file_of("{not json", "")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(refused(file_of("[1,2]", "")).find("not an object"), std::string::npos);
  EXPECT_NE(refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                            four))
                .find("names \"a\" twice"),
            std::string::npos);
  EXPECT_NE(refused(file_of(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", four.substr(0, 8)))
                .find("unknown dtype \"F33\""),
            std::string::npos);
  EXPECT_NE(refused(file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", four.substr(0, 8)))
                .find("span 8 bytes but shape [3] of F32 holds 12"),
            std::string::npos);
  // A header that lies about offsets: a gap, an overlap.
  EXPECT_NE(refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                            four))
                .find("tensor \"b\" starts at byte 12 of the data, but the tensor before it, \"a\", ends at byte 8: "
                      "a gap before it"),
            std::string::npos);
  // Issue 44 U7: an offset of 2^63 on the middle tensor is reported against that tensor, not against "c", the
  // healthy one that the sort moves into its place (which then seemed to leave a gap).
  const std::string far = refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                          R"("b":{"dtype":"F32","shape":[2],)"
                                          R"("data_offsets":[9223372036854775808,9223372036854775816]},)"
                                          R"("c":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                                          four + four.substr(0, 8)));
  EXPECT_NE(far.find("tensor \"b\": data_offsets [9223372036854775808, 9223372036854775816] run past the 24 bytes "
                     "of data the file holds"),
            std::string::npos)
      << far;
  EXPECT_EQ(far.find("\"c\""), std::string::npos) << far;
  EXPECT_NE(refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                            four))
                .find("overlaps the tensor before it"),
            std::string::npos);
  // A truncated payload, and bytes no tensor owns.
  EXPECT_NE(refused(file_of(ok, four.substr(0, 12))).find("the file is truncated"), std::string::npos);
  EXPECT_NE(refused(file_of(ok, four + "xx")).find("bytes no tensor owns"), std::string::npos);
  EXPECT_NE(refused(file_of(R"({"__metadata__":{"n":1}})", "")).find("not a string"), std::string::npos);
}

TEST_F(HfTest, ExportThenLoadIsBitwiseAndConv1DIsStoredTransposed) {
  for (bool bias : {true, false}) {
    const auto cfg = tiny_gpt(bias);
    const model::ParamLayout whole(cfg);
    const auto params = random_params(whole, bias ? 1 : 2);
    const std::string dir = (root_ / (bias ? "hf_bias" : "hf_nobias")).string();
    hf::export_hf_gpt2(dir, cfg, whole, params.data(), 65, nullptr);  // 65 real tokens of 70
    const auto c = hf::hf_gpt2_config(dir);
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.vocab_size, 65);
    EXPECT_EQ(c.block_size, 24);
    EXPECT_EQ(c.gelu, kernels::GeluKind::Tanh);
    const hf::SafetensorsReader f(dir + "/model.safetensors");
    const hf::StTensor* qkv = f.find("transformer.h.1.attn.c_attn.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->shape, (std::vector<int64_t>{16, 48}));  // [in, out]
    std::vector<float> t(16 * 48);
    f.read(*qkv, t.data());
    const auto& slot = whole.find("transformer.h.1.attn.c_attn.weight");
    EXPECT_EQ(t[5 * 48 + 40], params[static_cast<size_t>(slot.offset + 40 * 16 + 5)]);  // file [i][o] = ours [o][i]
    EXPECT_EQ(f.find("transformer.wte.weight")->shape, (std::vector<int64_t>{65, 16}));
    EXPECT_EQ(f.find("lm_head.weight"), nullptr);
    if (!bias) {
      EXPECT_NE(f.find("transformer.h.0.mlp.c_fc.bias"), nullptr) << "zero biases are written";
    }
    // Back into a model with biases (as Hugging Face's always has) and a vocabulary of 70: every weight
    // bitwise, the padding rows zero.
    auto back_cfg = cfg;
    back_cfg.bias = true;
    const model::ParamLayout back_layout(back_cfg);
    const auto back = hf::load_hf_gpt2(dir, back_cfg, back_layout);
    for (const auto& s : whole.slots()) {
      const auto& b = back_layout.find(s.name);
      for (int64_t i = 0; i < s.numel; ++i) {
        const bool pad = s.name == "transformer.wte.weight" && i >= 65 * 16;
        ASSERT_EQ(back[static_cast<size_t>(b.offset + i)], pad ? 0.0f : params[static_cast<size_t>(s.offset + i)])
            << s.name << " element " << i;
      }
    }
  }
}

// Issue 45: an untied head (model.tie_embeddings=false) is written as Hugging
// Face's lm_head.weight with tie_word_embeddings false, cut to the real tokens
// as wte is, and reads back bit for bit (the padding rows zero), whole or a
// tensor-parallel rank's slice; a tied model refuses to read it as its head.
TEST_F(HfTest, AnUntiedHeadIsWrittenAsLmHeadAndReadsBackBitwise) {
  auto cfg = tiny_gpt(true);
  cfg.tie_embeddings = false;
  const model::ParamLayout whole(cfg);
  const auto params = random_params(whole, 7);
  const auto& head = whole.find("lm_head.weight");
  const std::string dir = (root_ / "untied").string();
  hf::export_hf_gpt2(dir, cfg, whole, params.data(), 65, nullptr);  // 65 real tokens of 70
  const hf::SafetensorsReader f(dir + "/model.safetensors");
  ASSERT_NE(f.find("lm_head.weight"), nullptr);
  EXPECT_EQ(f.find("transformer.lm_head.weight"), nullptr);
  EXPECT_EQ(f.find("lm_head.weight")->shape, (std::vector<int64_t>{65, 16}));
  EXPECT_NE(slurp(fs::path(dir) / "config.json").find("\"tie_word_embeddings\": false"), std::string::npos);
  const auto c = hf::hf_gpt2_config(dir);
  EXPECT_FALSE(c.tie_embeddings);
  auto back_cfg = c;
  back_cfg.vocab_size = 70;
  const model::ParamLayout back_layout(back_cfg);
  const auto back = hf::load_hf_gpt2(dir, back_cfg, back_layout);
  for (const auto& s : whole.slots()) {
    const auto& b = back_layout.find(s.name);
    const bool table = s.name == "transformer.wte.weight" || s.name == "lm_head.weight";
    for (int64_t i = 0; i < s.numel; ++i)
      ASSERT_EQ(back[static_cast<size_t>(b.offset + i)],
                table && i >= 65 * 16 ? 0.0f : params[static_cast<size_t>(s.offset + i)])
          << s.name << " element " << i;
  }
  EXPECT_NE(params[static_cast<size_t>(head.offset)],
            params[static_cast<size_t>(whole.find("transformer.wte.weight").offset)]);
  for (int rank : {0, 1}) {  // tp 2: each rank its rows of the head
    const model::ParamLayout part(back_cfg, model::ShardSpec{2, rank});
    const auto mine = hf::load_hf_gpt2(dir, back_cfg, part);
    const int s = static_cast<int>(&part.find("lm_head.weight") - part.slots().data());
    std::vector<float> want(static_cast<size_t>(part.slots()[static_cast<size_t>(s)].numel));
    part.slice(s, back.data() + back_layout.find("lm_head.weight").offset, want.data());
    const int64_t at = part.find("lm_head.weight").offset;
    ASSERT_EQ(std::vector<float>(mine.begin() + at, mine.begin() + at + static_cast<int64_t>(want.size())), want)
        << "tp rank " << rank;
  }
  auto tied = back_cfg;
  tied.tie_embeddings = true;
  const std::string e = test_util::error_of<IoError>([&] { hf::load_hf_gpt2(dir, tied, model::ParamLayout(tied)); });
  EXPECT_NE(e.find("lm_head.weight is not wte.weight"), std::string::npos) << e;
}

TEST_F(HfTest, ATensorParallelPartReadsItsSliceOfTheWhole) {
  const auto cfg = tiny_gpt(true);
  const model::ParamLayout whole(cfg);
  const auto params = random_params(whole, 3);
  const std::string dir = (root_ / "hf").string();
  hf::export_hf_gpt2(dir, cfg, whole, params.data(), cfg.vocab_size, nullptr);
  const auto all = hf::load_hf_gpt2(dir, cfg, whole);
  for (int rank : {0, 1}) {
    const model::ParamLayout part(cfg, model::ShardSpec{2, rank});
    const auto mine = hf::load_hf_gpt2(dir, cfg, part);
    for (int s = 0; s < static_cast<int>(part.slots().size()); ++s) {
      const auto& slot = part.slots()[static_cast<size_t>(s)];
      std::vector<float> want(static_cast<size_t>(slot.numel));
      part.slice(s, all.data() + whole.find(slot.name).offset, want.data());
      ASSERT_EQ(std::vector<float>(mine.begin() + slot.offset, mine.begin() + slot.offset + slot.numel), want)
          << slot.name << " on tp rank " << rank;
    }
  }
}

TEST_F(HfTest, MismatchedDirectoriesAreRefusedNamingTheTensorAndShapes) {
  const auto cfg = tiny_gpt(true);
  const model::ParamLayout whole(cfg);
  const auto params = random_params(whole, 4);
  const std::string dir = (root_ / "hf").string();
  hf::export_hf_gpt2(dir, cfg, whole, params.data(), cfg.vocab_size, nullptr);
  auto wider = cfg;
  wider.n_embd = 32;
  std::string e = test_util::error_of<IoError>([&] { hf::load_hf_gpt2(dir, wider, model::ParamLayout(wider)); });
  EXPECT_NE(e.find("has shape [70, 16], but the model"), std::string::npos) << e;
  auto deeper = cfg;
  deeper.n_layer = 3;
  e = test_util::error_of<IoError>([&] { hf::load_hf_gpt2(dir, deeper, model::ParamLayout(deeper)); });
  EXPECT_NE(e.find("has no tensor \"h.2.ln_1.weight\""), std::string::npos) << e;
  auto shallower = cfg;
  shallower.n_layer = 1;
  e = test_util::error_of<IoError>([&] { hf::load_hf_gpt2(dir, shallower, model::ParamLayout(shallower)); });
  EXPECT_NE(e.find("\"transformer.h.1."), std::string::npos) << e;
  EXPECT_NE(e.find("is not a weight of the model (n_layer=1"), std::string::npos) << e;
  auto small_vocab = cfg;
  small_vocab.vocab_size = 60;
  e = test_util::error_of<IoError>([&] { hf::load_hf_gpt2(dir, small_vocab, model::ParamLayout(small_vocab)); });
  EXPECT_NE(e.find("token table has 70 rows but model.vocab_size is 60"), std::string::npos) << e;
  // Issue 44 U6: a NaN in the imported weights is named with its tensor (it was "lower the learning rate").
  {
    std::vector<float> nan_params = params;
    const model::ParamSlot* fc = nullptr;
    for (const auto& sl : whole.slots())
      if (sl.name == "transformer.h.1.mlp.c_fc.weight") fc = &sl;
    ASSERT_NE(fc, nullptr);
    nan_params[static_cast<size_t>(fc->offset + 5)] = std::nanf("");
    const std::string nan_dir = (root_ / "nan").string();
    hf::export_hf_gpt2(nan_dir, cfg, whole, nan_params.data(), cfg.vocab_size, nullptr);
    e = test_util::error_of<IoError>([&] { hf::load_hf_gpt2(nan_dir, cfg, whole); });
    EXPECT_NE(e.find("tensor \"transformer.h.1.mlp.c_fc.weight\" holds nan at element "), std::string::npos) << e;
    EXPECT_NE(e.find("weights must be finite"), std::string::npos) << e;
  }
  // A truncated model.safetensors is refused before any weight is used.
  fs::resize_file(fs::path(dir) / "model.safetensors", fs::file_size(fs::path(dir) / "model.safetensors") - 4);
  e = test_util::error_of<IoError>([&] { hf::load_hf_gpt2(dir, cfg, whole); });
  EXPECT_NE(e.find("the file is truncated"), std::string::npos) << e;
  put(fs::path(dir) / "config.json", R"({"model_type":"llama","n_layer":2})");
  e = test_util::error_of<IoError>([&] { hf::hf_gpt2_config(dir); });
  EXPECT_NE(e.find("model_type \"llama\""), std::string::npos) << e;
}

// A run trained on a BPE dataset, exported, starts another run
// (train.init_from=hf:DIR) from exactly its weights: with a learning rate of 0
// the new run's saved state is the exported one, bit for bit.
TEST_F(HfTest, ARunFromAnHfDirectoryStartsFromItsWeights) {
  const data::Bpe bpe = test_util::small_bpe();
  prepare_bpe_data(bpe);
  auto config = [&](const std::string& out, std::vector<std::string> more) {
    RunConfig c;
    c.apply_overrides(test_util::tiny_run_overrides(root_, out));
    more.push_back("data.dir=" + (root_ / "bpe_data").string());
    c.apply_overrides(more);
    return c;
  };
  run_training(config("a", {"train.max_iters=3", "model.bias=true", "model.gelu=tanh"}));
  const auto meta = choose_checkpoint((root_ / "a").string(), nullptr);
  const RunConfig a = RunConfig::from_json(meta["config"]);
  EXPECT_EQ(a.model.vocab_size, 265);
  model::GPT ma(a.model, 1, 1);
  load_checkpoint(checkpoint_of(meta), ma, nullptr);
  std::vector<float> pa(static_cast<size_t>(ma.flat_size()));
  ma.store_params(pa.data());
  const std::string hf = (root_ / "hf").string();
  hf::export_hf_gpt2(hf, a.model, ma.layout(), pa.data(), 265, &bpe);

  const std::string from = "train.init_from=hf:" + hf;
  run_training(config("b", {from, "train.max_iters=0", "optimizer.learning_rate=0", "optimizer.min_lr=0"}));
  const auto mb_meta = choose_checkpoint((root_ / "b").string(), nullptr);
  const RunConfig b = RunConfig::from_json(mb_meta["config"]);
  EXPECT_TRUE(b.model.bias);
  EXPECT_EQ(b.model.gelu, kernels::GeluKind::Tanh);
  EXPECT_EQ(b.train.init_from, InitFrom::Hf);
  model::GPT mb(b.model, 1, 1);
  load_checkpoint(checkpoint_of(mb_meta), mb, nullptr);
  std::vector<float> pb(static_cast<size_t>(mb.flat_size()));
  mb.store_params(pb.data());
  EXPECT_EQ(pb, pa);

  std::string e = test_util::error_of<ConfigError>([&] {
    run_training(config("c", {from, "model.n_layer=3", "train.max_iters=0"}));
  });
  EXPECT_NE(e.find("model.n_layer=3, but train.init_from=hf:" + hf + " holds a model with 2"), std::string::npos) << e;
  e = test_util::error_of<ConfigError>([&] {
    RunConfig c = config("d", {from, "train.max_iters=0"});
    c.apply_overrides({"data.dir=" + (root_ / "chars").string()});
    fs::create_directories(root_ / "chars_root");
    test_util::prepare_tiny_dataset(root_ / "chars_root");
    c.apply_overrides({"data.dir=" + (root_ / "chars_root" / "data").string()});
    run_training(c);
  });
  EXPECT_NE(e.find("is a BPE model, but data.dir="), std::string::npos) << e;
  // Issue 44 U5: config.json's vocab_size below the dataset's is blamed on the file, not on model.vocab_size
  // (which this run never set).
  const fs::path small = root_ / "hf_small";
  fs::create_directories(small);
  for (const char* f : {"model.safetensors", "vocab.json", "merges.txt"}) fs::copy_file(fs::path(hf) / f, small / f);
  std::string cj = slurp(fs::path(hf) / "config.json");
  const size_t at = cj.find("\"vocab_size\": 265");
  ASSERT_NE(at, std::string::npos) << cj;
  put(small / "config.json", cj.replace(at, 17, "\"vocab_size\": 200"));
  e = test_util::error_of<ConfigError>([&] {
    run_training(config("e", {"train.init_from=hf:" + small.string(), "train.max_iters=0"}));
  });
  EXPECT_NE(e.find("train.init_from=hf:" + small.string() +
                   ": its config.json's vocab_size (200) is smaller than the dataset's vocabulary"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("model.vocab_size"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(root_ / "c"));
  EXPECT_FALSE(fs::exists(root_ / "e"));
}

// Issue 44, B5: `parallm export` into a directory holding an earlier export
// left its vocab.json, merges.txt and tokenizer_config.json beside a
// character model, and wrote into any non-empty directory without notice. A
// non-empty --out is refused naming what it holds, before anything is
// written; --overwrite replaces an earlier export whole, keeping other files.
TEST_F(HfTest, ExportRefusesANonEmptyDirectoryAndReplacesAnEarlierExportWhole) {
  prepare_bpe_data(test_util::small_bpe());
  test_util::prepare_tiny_dataset(root_);  // characters, in root_/data
  auto train_on = [&](const std::string& out, const std::string& data) {
    RunConfig c;
    c.apply_overrides(test_util::tiny_run_overrides(root_, out));
    c.apply_overrides({"train.max_iters=1", "data.dir=" + (root_ / data).string()});
    run_training(c);
  };
  train_on("bpe_run", "bpe_data");
  train_on("char_run", "data");
  const fs::path out = root_ / "export";
  const std::string said = export_run_hf((root_ / "bpe_run").string(), out.string(), {});
  EXPECT_NE(said.find("vocab.json, merges.txt, tokenizer.json, tokenizer_config.json"), std::string::npos) << said;
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  put(out / "README.md", "my notes\n");
  const std::string before = slurp(out / "config.json");
  const std::string e =
      test_util::error_of<ConfigError>([&] { export_run_hf((root_ / "char_run").string(), out.string(), {}); });
  EXPECT_NE(e.find("--out " + out.string() + " is not empty (it holds README.md, config.json, merges.txt"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  EXPECT_EQ(slurp(out / "config.json"), before) << "a refused export changed the directory";
  HfExportOptions o;
  o.overwrite = true;
  const std::string replaced = export_run_hf((root_ / "char_run").string(), out.string(), o);
  EXPECT_NE(replaced.find("removed the earlier export's merges.txt, tokenizer.json, tokenizer_config.json, vocab.json"),
            std::string::npos)
      << replaced;
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"}) EXPECT_FALSE(fs::exists(out / f)) << f;
  EXPECT_EQ(slurp(out / "README.md"), "my notes\n");
  EXPECT_EQ(hf::hf_gpt2_config(out.string()).vocab_size, 16);  // the character run's model
  put(root_ / "a_file", "x");
  EXPECT_NE(test_util::error_of<ConfigError>([&] {
              export_run_hf((root_ / "char_run").string(), (root_ / "a_file").string(), o);
            }).find("exists and is not a directory"),
            std::string::npos);
}

// A GPT-2 directory exported by parallm, read by the PyTorch reference model
// (tools/torch_ref/hf_logits.py, which parses model.safetensors by the
// format's documented layout, transposes the Conv1D weights itself and uses
// torch's tanh GELU), gives the logits parallm computes from the same
// directory, within 1e-5 relative. The reference's logits are a golden file,
// made once by tools/torch_ref/gen_hf_golden.sh (torch is never needed to test).
TEST_F(HfTest, ExportedModelGivesTheReferenceModelsLogits) {
  const auto cfg = tiny_gpt(true);
  const model::ParamLayout whole(cfg);
  std::vector<float> params(static_cast<size_t>(whole.total()));
  whole.init(params.data(), 7);
  const std::string dir = (root_ / "hf").string();
  hf::export_hf_gpt2(dir, cfg, whole, params.data(), cfg.vocab_size, nullptr);
  if (const char* keep = std::getenv("PARALLM_HF_GOLDEN_DIR")) {  // for gen_hf_golden.sh
    fs::remove_all(keep);
    fs::copy(dir, keep, fs::copy_options::recursive);
  }
  const std::vector<int32_t> ids = {3, 14, 15, 9, 26, 53, 58, 9, 7, 9, 69};
  const auto T = static_cast<int64_t>(ids.size()), V = cfg.vocab_size;
  const auto c = hf::hf_gpt2_config(dir);
  model::GPT m(c, 1, T);
  m.load_params(hf::load_hf_gpt2(dir, c, m.layout()).data());
  m.forward(ids.data(), nullptr, 1, T, model::StepContext{});
  std::vector<float> got(static_cast<size_t>(T * V));
  for (int64_t pos = 0; pos < T; ++pos) m.last_logits(got.data() + pos * V, 1, T, pos);
  const std::string golden = slurp(fs::path(test::test_dir()) / "golden" / "hf_tiny_logits.bin");
  ASSERT_EQ(golden.size(), got.size() * 4)
      << "tests/golden/hf_tiny_logits.bin: make it with tools/torch_ref/gen_hf_golden.sh";
  std::vector<float> want(got.size());
  std::memcpy(want.data(), golden.data(), golden.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  std::printf("exported tiny GPT-2, parallm vs the PyTorch reference: max relative logit difference %.3g\n",
              diff / scale);
  EXPECT_LE(diff / scale, 1e-5);
}
