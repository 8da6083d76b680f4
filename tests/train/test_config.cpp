// Config keys: every error names the key; files and overrides agree.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/gpu.h"
#include "kernels/bf16.h"
#include "parallel/mesh.h"
#include "train/config/config.h"
#include "train/config/run_checks.h"
#include "train/error_of.h"

using namespace parallm;

using parallm::test_util::error_of;

TEST(Config, OverridesSetTypedValues) {
  train::RunConfig c;
  c.apply_overrides({"model.n_layer=4", "model.dropout=0.1", "model.bias=true", "optimizer.learning_rate=1e-3",
                     "train.out_dir=/tmp/x", "optimizer.gas=2", "train.max_iters=5_000"});
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_FLOAT_EQ(c.model.dropout, 0.1f);
  EXPECT_TRUE(c.model.bias);
  EXPECT_FLOAT_EQ(c.optimizer.learning_rate, 1e-3f);
  EXPECT_EQ(c.train.out_dir, "/tmp/x");
  EXPECT_EQ(c.optimizer.gas, 2);
  EXPECT_EQ(c.train.max_iters, 5000);
}

TEST(Config, ErrorsNameTheKey) {
  train::RunConfig c;
  EXPECT_NE(error_of([&] { c.set("model.n_layr", "3"); }).find("model.n_layr"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("n_layer", "3"); }).find("did you mean model.n_layer"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("model.n_layer", "three"); }).find("model.n_layer"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("model.bias", "maybe"); }).find("model.bias"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("train.init_from", "gpt2-xl"); }).find("train.init_from"), std::string::npos);
  c.set("train.init_from", "auto");  // resume where a checkpoint exists (open_session decides), else scratch
  EXPECT_EQ(c.train.init_from, train::InitFrom::Auto);
  EXPECT_EQ(c.to_json()["train.init_from"], "auto");
  c.set("train.init_from", "scratch");
  EXPECT_NE(error_of([&] { c.apply_overrides({"model.n_layer"}); }).find("key=value"), std::string::npos);
  c.set("model.n_head", "5");
  EXPECT_NE(error_of([&] { c.validate(); }).find("model.n_head"), std::string::npos);
  train::RunConfig d;
  d.set("optimizer.gas", "0");
  EXPECT_NE(error_of([&] { d.validate(); }).find("optimizer.gas"), std::string::npos);
  train::RunConfig e;
  e.set("ddp.shards", "2");  // only meaningful with ddp.deterministic=true
  EXPECT_NE(error_of([&] { e.validate(); }).find("ddp.deterministic"), std::string::npos);
}

TEST(Config, ZeroKeysAreCheckedTogether) {
  auto validate_error = [](std::vector<std::string> kv) {
    train::RunConfig c;
    c.apply_overrides(kv);
    return error_of([&] { c.validate(); });
  };
  EXPECT_NE(validate_error({"zero.stage=4"}).find("zero.stage"), std::string::npos);
  // Stored whole: a value that would wrap an int to a valid stage is refused by name.
  EXPECT_NE(validate_error({"zero.stage=4294967297"}).find("zero.stage must be in [0, 3], got 4294967297"),
            std::string::npos);
  EXPECT_NE(validate_error({"zero.stage=1", "ddp.deterministic=true"}).find("ddp.deterministic"), std::string::npos);
  EXPECT_NE(validate_error({"zero.offload=optimizer"}).find("needs a sharded stage"), std::string::npos);
  EXPECT_NE(validate_error({"zero.stage=2", "zero.offload=params"}).find("zero.stage=3"), std::string::npos);
  EXPECT_NE(validate_error({"zero.stage=3", "zero.prefetch=-1"}).find("zero.prefetch"), std::string::npos);
  EXPECT_NE(error_of([] { train::RunConfig().set("zero.offload", "disk"); }).find("zero.offload"), std::string::npos);
  EXPECT_EQ(validate_error({"zero.stage=3", "zero.offload=params", "zero.prefetch=2"}), "");
}

// The mesh's keys: parsed into numbers, and the parallelisms that are not
// built yet refused in words, naming the key.
TEST(Config, ParallelKeysBadLayoutsAndTheAxesNotBuiltYet) {
  auto validate_error = [](std::vector<std::string> kv) {
    train::RunConfig c;
    c.apply_overrides(kv);
    return error_of([&] { c.validate(); });
  };
  train::RunConfig c;
  c.apply_overrides({"parallel.dp=3", "parallel.tp_across_nodes=true"});
  EXPECT_EQ(c.mesh_dims().dp, 3);
  EXPECT_EQ(c.mesh_dims().tp, 1);
  EXPECT_TRUE(c.parallel.tp_across_nodes);
  EXPECT_EQ(train::RunConfig().mesh_dims().dp, 0);   // derived from the world
  EXPECT_EQ(validate_error({"parallel.tp=2"}), "");  // 6 heads
  const std::string heads = validate_error({"parallel.tp=4"});
  EXPECT_NE(heads.find("model.n_head=6 is not divisible by parallel.tp=4"), std::string::npos) << heads;
  const std::string sp_alone = validate_error({"parallel.sequence_parallel=true"});
  EXPECT_NE(sp_alone.find("parallel.sequence_parallel=true splits the residual stream over the tensor-parallel group, "
                          "but parallel.tp=1"),
            std::string::npos)
      << sp_alone;
  const std::string sp_T =
      validate_error({"parallel.tp=3", "model.n_head=6", "model.block_size=256", "parallel.sequence_parallel=true"});
  EXPECT_NE(sp_T.find("model.block_size=256 is not divisible by it"), std::string::npos) << sp_T;
  EXPECT_EQ(validate_error({"parallel.tp=2", "parallel.sequence_parallel=true", "model.recompute=full"}), "");
  train::RunConfig rc;
  EXPECT_NE(error_of([&] { rc.set("model.recompute", "some"); }).find("expected none, selective or full"),
            std::string::npos);
  for (const char* stage : {"zero.stage=1", "zero.stage=2", "zero.stage=3"})  // ZeRO shards each tp rank's part
    EXPECT_EQ(validate_error({"parallel.tp=2", stage}), "") << stage;
  EXPECT_EQ(validate_error({"parallel.tp=2", "zero.stage=3", "zero.offload=params"}), "");
  // Pipeline keys: valid layouts pass; bad ones are named (the rest in cli.pipeline.layout_*).
  EXPECT_EQ(validate_error({"parallel.pp=2"}), "");
  EXPECT_EQ(validate_error({"parallel.pp=2", "parallel.tp=2", "zero.stage=1", "parallel.pp_schedule=zb-h1"}), "");
  EXPECT_EQ(
      validate_error({"parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.pp_virtual=2", "optimizer.gas=4"}),
      "");
  EXPECT_EQ(validate_error({"parallel.pp=2", "parallel.pp_layers=5,1"}), "");
  EXPECT_NE(validate_error({"parallel.pp=2", "parallel.pp_layers=3,3,0"}).find("parallel.pp_layers gives 3 counts"),
            std::string::npos);
  EXPECT_NE(validate_error({"parallel.pp=2", "parallel.pp_layers=6,0"}).find("stage 1 gets 0 layers"),
            std::string::npos);
  EXPECT_NE(validate_error({"parallel.pp=2", "zero.stage=3"}).find("zero.stage=3 with parallel.pp=2"),
            std::string::npos);
  EXPECT_NE(validate_error({"parallel.pp=2", "ddp.deterministic=true"}).find("ddp.deterministic=true with parallel.pp"),
            std::string::npos);
  EXPECT_NE(validate_error({"parallel.pp_layers=6"}).find("parallel.pp_layers is for parallel.pp > 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { rc.set("parallel.pp_schedule", "2f2b"); }).find("gpipe|1f1b|interleaved|zb-h1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { rc.set("parallel.pp_layers", "2,x"); }).find("parallel.pp_layers"), std::string::npos);
  {  // the typed keys round-trip through JSON with the user's spellings
    train::RunConfig p;
    p.apply_overrides({"parallel.pp=2", "parallel.pp_schedule=zb-h1", "parallel.pp_layers=2,4"});
    const auto back = train::RunConfig::from_json(p.to_json());
    EXPECT_EQ(back.to_json()["parallel.pp_schedule"], "zb-h1");
    EXPECT_EQ(back.to_json()["parallel.pp_layers"], "2,4");
    EXPECT_EQ(back.parallel.pp_layers, (std::vector<int64_t>{2, 4}));
  }
  // Context parallelism: the layouts that split, and those refused by name.
  EXPECT_EQ(validate_error({"parallel.cp=4"}), "");                                               // ring: 256 % 8
  EXPECT_EQ(validate_error({"parallel.cp=2", "parallel.cp_kind=ulysses", "parallel.tp=3"}), "");  // 6 heads / (3 x 2)
  const std::string ring_T = validate_error({"parallel.cp=3"});
  EXPECT_NE(ring_T.find("model.block_size=256 is not divisible by 2 x parallel.cp = 6: ring attention splits the "
                        "sequence into 2 x cp chunks"),
            std::string::npos)
      << ring_T;
  const std::string uly_heads = validate_error({"parallel.cp=4", "parallel.cp_kind=ulysses"});
  EXPECT_NE(uly_heads.find("model.n_head=6 is not divisible by parallel.tp=1 x parallel.cp=4: Ulysses gives each rank "
                           "n_head/(tp x cp) whole heads"),
            std::string::npos)
      << uly_heads;
  const std::string uly_T = validate_error({"parallel.cp=3", "parallel.cp_kind=ulysses", "model.block_size=64"});
  EXPECT_NE(uly_T.find("model.block_size=64 is not divisible by parallel.cp=3"), std::string::npos) << uly_T;
  const std::string cp_sp = validate_error({"parallel.cp=2", "parallel.tp=2", "parallel.sequence_parallel=true"});
  EXPECT_NE(cp_sp.find("parallel.sequence_parallel=true with parallel.cp=2: both split the sequence"),
            std::string::npos)
      << cp_sp;
  EXPECT_NE(
      validate_error({"parallel.cp=2", "ddp.deterministic=true"}).find("ddp.deterministic=true with parallel.cp=2"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              train::RunConfig().set("parallel.cp_kind", "zigzag");
            }).find("parallel.cp_kind='zigzag' is not one of ring, ulysses"),
            std::string::npos);
  {
    train::RunConfig u;
    u.apply_overrides({"parallel.cp=2", "parallel.cp_kind=ulysses"});
    EXPECT_EQ(train::RunConfig::from_json(u.to_json()).parallel.cp_kind, model::CpKind::Ulysses);
  }
  EXPECT_NE(validate_error({"parallel.tp=0"}).find("parallel.tp must be in [1, "), std::string::npos);
  EXPECT_NE(validate_error({"parallel.dp=-1"}).find("parallel.dp must be in [0, "), std::string::npos);
  EXPECT_EQ(validate_error({"parallel.dp=4", "parallel.tp=1"}), "");
}

TEST(Config, DeviceKeyParsesAndExplainsWhatIsMissing) {
  train::RunConfig c;
  EXPECT_NE(error_of([&] { c.set("train.device", "tpu"); }).find("train.device"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("train.device", "cuda:x"); }).find("train.device"), std::string::npos);
  c.set("train.device", "CUDA:1");
  EXPECT_EQ(c.to_json()["train.device"], "cuda:1");
  if (!gpu::built()) {
    EXPECT_NE(error_of([&] { c.validate(); }).find("built without CUDA"), std::string::npos);
  }
  train::RunConfig e;
  e.set("train.device", "cpu");
  EXPECT_NO_THROW(e.validate());
  // ZeRO and the deterministic reduction run on the GPU too.
  for (const char* key : {"zero.stage=3", "ddp.deterministic=true"}) {
    train::RunConfig z;
    z.set("train.device", "cuda");
    z.apply_overrides({key});
    if (gpu::built())
      EXPECT_NO_THROW(z.validate()) << key;
    else
      EXPECT_NE(error_of([&] { z.validate(); }).find("built without CUDA"), std::string::npos) << key;
  }
}

TEST(Config, CommBackendNamesTheChoices) {
  train::RunConfig c;
  for (const char* b : {"auto", "self", "mpi", "nccl"}) {
    c.set("comm.backend", b);
    EXPECT_EQ(c.comm.backend, b);
  }
  const std::string e = error_of([&] { c.set("comm.backend", "gloo"); });
  EXPECT_NE(e.find("comm.backend"), std::string::npos) << e;
  EXPECT_NE(e.find("nccl"), std::string::npos) << e;
  // auto means nccl only for GPU ranks started by a launcher, and only where NCCL was built.
  EXPECT_EQ(comm::resolve_backend("mpi", true), "mpi");
  EXPECT_EQ(comm::resolve_backend("auto", false), "auto");
  // Without NCCL, or without a GPU, the nccl backend says what is missing.
  const std::string n = error_of([] { comm::make_world("nccl"); });
  if (!comm::nccl_built()) {
    EXPECT_NE(n.find("built without NCCL"), std::string::npos) << n;
  } else if (!gpu::available()) {
    EXPECT_NE(n.find("needs a GPU"), std::string::npos) << n;
  }
}

TEST(Config, DtypeSpellingsMapAndFp16AndFp8RunOnTheCpuOnly) {
  for (const auto& [in, want] : std::vector<std::pair<std::string, std::string>>{{"fp32", "fp32"},
                                                                                 {"float32", "fp32"},
                                                                                 {"FP32", "fp32"},
                                                                                 {"bf16", "bf16"},
                                                                                 {"bfloat16", "bf16"},
                                                                                 {"BF16", "bf16"},
                                                                                 {"fp16", "fp16"},
                                                                                 {"float16", "fp16"},
                                                                                 {"FP8", "fp8"}}) {
    train::RunConfig c;
    c.set("train.dtype", in);
    EXPECT_EQ(c.to_json()["train.dtype"], want) << in;
  }
  train::RunConfig c;
  const std::string bad = error_of([&] { c.set("train.dtype", "fp4"); });
  EXPECT_NE(bad.find("train.dtype"), std::string::npos) << bad;
  EXPECT_NE(bad.find("fp4"), std::string::npos) << bad;
  c.set("train.dtype", "bf16");
  if (kernels::bf16_products_supported())
    EXPECT_NO_THROW(c.validate());  // the CPU runs bf16 products
  else
    EXPECT_NE(error_of([&] { c.validate(); }).find("train.dtype=bf16"), std::string::npos);
  c.set("train.dtype", "fp16");
  EXPECT_NO_THROW(c.validate());               // the CPU's fp16 products (emulated)
  for (const char* dtype : {"fp16", "fp8"}) {  // the GPU computes the CPU's products (kernels/cuda/lowp.cuh)
    c.set("train.dtype", dtype);
    c.set("train.device", "cuda");
    if (gpu::built())
      EXPECT_NO_THROW(c.validate()) << dtype;
    else
      EXPECT_NE(error_of([&] { c.validate(); }).find("built without CUDA"), std::string::npos) << dtype;
  }
  c.set("train.device", "cpu");
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.loss_scale_config().mode, optim::LossScaleMode::Off) << "FP8's row scaling needs no loss scale";
}

TEST(Config, Fp8ScalingIsCheckedAgainstTheDtypeAndTheModel) {
  train::RunConfig c;
  const std::string bad = error_of([&] { c.set("train.fp8_scaling", "blockwise"); });
  EXPECT_NE(bad.find("train.fp8_scaling"), std::string::npos) << bad;
  EXPECT_NE(bad.find("rowwise or tensorwise"), std::string::npos) << bad;
  c.set("train.fp8_scaling", "Tensorwise");
  EXPECT_EQ(c.to_json()["train.fp8_scaling"], "tensorwise");
  EXPECT_NE(error_of([&] { c.validate(); }).find("needs train.dtype=fp8"), std::string::npos);
  c.set("train.dtype", "fp8");
  EXPECT_NO_THROW(c.validate());
  c.apply_overrides({"model.arch=llama", "model.moe_experts=4", "model.moe_top_k=2"});
  const std::string moe = error_of([&] { c.validate(); });
  EXPECT_NE(moe.find("model.moe_experts=4"), std::string::npos) << moe;
  EXPECT_NE(moe.find("train.fp8_scaling=rowwise"), std::string::npos) << moe;
  c.set("train.fp8_scaling", "rowwise");
  EXPECT_EQ(error_of([&] { c.validate(); }).find("fp8_scaling"), std::string::npos);
}

// train.fp8_activations=bf16 (GPU FP8 tensor cores with bf16 activations): needs FP8, tensorwise scaling and a GPU;
// it makes the compute dtype bf16. train.cuda_graphs is a plain switch, off by default.
TEST(Config, Fp8ActivationsAreCheckedAgainstTheDtypeTheScalingAndTheDevice) {
  train::RunConfig c;
  const std::string bad = error_of([&] { c.set("train.fp8_activations", "fp16"); });
  EXPECT_NE(bad.find("expected fp32 or bf16"), std::string::npos) << bad;
  c.set("train.fp8_activations", "BF16");
  EXPECT_EQ(c.to_json()["train.fp8_activations"], "bf16");
  EXPECT_NE(error_of([&] { c.validate(); }).find("needs train.dtype=fp8"), std::string::npos);
  c.set("train.dtype", "fp8");
  EXPECT_EQ(c.compute_dtype(), DType::BF16);
  EXPECT_NE(error_of([&] { c.validate(); }).find("needs train.fp8_scaling=tensorwise"), std::string::npos);
  c.set("train.fp8_scaling", "tensorwise");
  const std::string cpu = error_of([&] { c.validate(); });
  EXPECT_NE(cpu.find("needs train.device=cuda"), std::string::npos) << cpu;
  c.set("train.fp8_activations", "fp32");
  EXPECT_EQ(c.compute_dtype(), DType::F32);
  EXPECT_NO_THROW(c.validate());
  EXPECT_FALSE(c.train.cuda_graphs);
  c.set("train.cuda_graphs", "true");
  EXPECT_TRUE(c.train.cuda_graphs);
  EXPECT_EQ(c.to_json()["train.cuda_graphs"], true);
}

namespace {
optim::LossScaleConfig loss_scale_of(const std::string& value, const std::string& dtype, double init, int64_t window) {
  train::RunConfig c;
  c.set("train.dtype", dtype);
  c.set("train.loss_scale", value);
  c.train.loss_scale_init = init;
  c.train.loss_scale_window = window;
  return c.loss_scale_config();
}
}  // namespace

TEST(Config, LossScaleParsesTheModes) {
  using optim::LossScaleMode;
  EXPECT_EQ(loss_scale_of("auto", "fp16", 65536, 2000).mode, LossScaleMode::Dynamic);
  EXPECT_EQ(loss_scale_of("auto", "bf16", 65536, 2000).mode, LossScaleMode::Off);
  EXPECT_EQ(loss_scale_of("auto", "fp32", 65536, 2000).mode, LossScaleMode::Off);
  auto d = loss_scale_of("dynamic", "fp32", 1024, 7);
  EXPECT_EQ(d.mode, LossScaleMode::Dynamic);
  EXPECT_EQ(d.scale, 1024);
  EXPECT_EQ(d.window, 7);
  EXPECT_EQ(loss_scale_of("off", "fp16", 65536, 2000).mode, LossScaleMode::Off);
  auto s = loss_scale_of("128", "fp32", 65536, 2000);
  EXPECT_EQ(s.mode, LossScaleMode::Static);
  EXPECT_EQ(s.scale, 128);
  EXPECT_EQ(loss_scale_of("1", "fp32", 65536, 2000).mode, LossScaleMode::Off);
}

TEST(Config, LossScaleRefusesWhatIsNotAPowerOfTwo) {
  EXPECT_NE(error_of([] { loss_scale_of("100", "fp32", 65536, 2000); }).find("train.loss_scale=100"),
            std::string::npos);
  EXPECT_NE(error_of([] { loss_scale_of("banana", "fp32", 65536, 2000); }).find("\"banana\""), std::string::npos);
  EXPECT_NE(error_of([] { loss_scale_of("0.5", "fp32", 65536, 2000); }).find("power of two"), std::string::npos);
  EXPECT_NE(error_of([] { loss_scale_of("dynamic", "fp32", 1000, 2000); }).find("train.loss_scale_init"),
            std::string::npos);
  EXPECT_NE(error_of([] { loss_scale_of("dynamic", "fp32", 65536, 0); }).find("train.loss_scale_window"),
            std::string::npos);
}

TEST(Config, LossScaleKeysParseAndNameTheKey) {
  train::RunConfig c;
  for (const char* v : {"auto", "dynamic", "off", "Dynamic", "1024"}) {
    c.set("train.loss_scale", v);
    c.validate();
  }
  EXPECT_EQ(c.to_json()["train.loss_scale"], "1024");
  c.set("train.loss_scale", "dynamic");
  c.set("train.loss_scale_init", "4096");
  c.set("train.loss_scale_window", "500");
  c.validate();
  EXPECT_EQ(train::RunConfig::from_json(c.to_json()).to_json(), c.to_json());
  std::string e = error_of([&] { c.set("train.loss_scale", "1000"); });
  EXPECT_NE(e.find("train.loss_scale=1000"), std::string::npos) << e;
  EXPECT_NE(e.find("power of two"), std::string::npos) << e;
  e = error_of([&] { c.set("train.loss_scale", "sometimes"); });
  EXPECT_NE(e.find("train.loss_scale"), std::string::npos) << e;
  EXPECT_NE(e.find("dynamic"), std::string::npos) << e;
  c.set("train.loss_scale_init", "3");
  e = error_of([&] { c.validate(); });
  EXPECT_NE(e.find("train.loss_scale_init"), std::string::npos) << e;
  c.set("train.loss_scale_init", "65536");
  c.set("train.loss_scale_window", "0");
  e = error_of([&] { c.validate(); });
  EXPECT_NE(e.find("train.loss_scale_window"), std::string::npos) << e;
}

TEST(Config, YamlNestedAndDottedKeysAndJsonRoundTrip) {
  auto p = std::filesystem::temp_directory_path() / "parallm_test_cfg.yaml";
  std::ofstream(p) << "model:\n  n_layer: 3\n  n_embd: 96\ntrain.max_iters: 77\noptimizer:\n  beta2: 0.99\n";
  train::RunConfig c;
  c.load_file(p.string());
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.n_embd, 96);
  EXPECT_EQ(c.train.max_iters, 77);
  EXPECT_FLOAT_EQ(c.optimizer.beta2, 0.99f);
  auto back = train::RunConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  std::ofstream(p) << "model:\n  n_layers: 3\n";
  EXPECT_NE(error_of([&] { train::RunConfig().load_file(p.string()); }).find("model.n_layers"), std::string::npos);
  std::ofstream(p) << "model: [1, 2\n";
  EXPECT_THROW(train::RunConfig().load_file(p.string()), ConfigError);
  EXPECT_THROW(train::RunConfig().load_file("/nonexistent/x.yaml"), IoError);
  std::filesystem::remove(p);
}

TEST(Config, NumbersAreFiniteDecimalsAndRangesNameTheKey) {
  train::RunConfig c;
  EXPECT_NE(error_of([&] { c.set("train.max_iters", "0x10"); }).find("train.max_iters"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("optimizer.learning_rate", "inf"); }).find("optimizer.learning_rate"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.set("optimizer.grad_clip", "nan"); }).find("optimizer.grad_clip"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("train.seed", "-1"); }).find("train.seed"), std::string::npos);
  c.set("train.max_iters", "1e3");
  EXPECT_EQ(c.train.max_iters, 1000);
  auto validate_error = [](std::vector<std::string> kv) {
    train::RunConfig r;
    r.apply_overrides(kv);
    return error_of([&] { r.validate(); });
  };
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"optimizer.learning_rate=-1"}, "optimizer.learning_rate must be in [0, 100], got -1"},
      {{"optimizer.beta1=1.5"}, "optimizer.beta1 must be in [0, 1), got 1.5"},
      {{"optimizer.weight_decay=-1"}, "optimizer.weight_decay"},
      {{"optimizer.grad_clip=-1"}, "optimizer.grad_clip"},
      {{"optimizer.eps=0"}, "optimizer.eps"},
      {{"optimizer.min_lr=0.1", "optimizer.learning_rate=0.001"}, "optimizer.min_lr=0.1"},
      {{"optimizer.lr_decay_iters=10", "optimizer.warmup_iters=50"}, "optimizer.lr_decay_iters=10"},
      {{"optimizer.lr_decay_iters=-5"}, "optimizer.lr_decay_iters"},
      {{"train.top_k=-5"}, "train.top_k"},
      {{"train.sample_tokens=-5"}, "train.sample_tokens"},
      {{"train.threads=-4"}, "train.threads"},
      {{"train.peak_flops=-1"}, "train.peak_flops"},
      {{"train.out_dir="}, "train.out_dir"}};
  for (const auto& [kv, want] : bad) EXPECT_NE(validate_error(kv).find(want), std::string::npos) << kv[0];
  // Without the decay, min_lr and lr_decay_iters mean nothing and are not checked.
  EXPECT_EQ(validate_error({"optimizer.decay_lr=false", "optimizer.min_lr=0.1", "optimizer.learning_rate=0.001"}), "");
}

TEST(Config, FloatsReadBackAsWritten) {
  train::RunConfig c;
  c.set("optimizer.learning_rate", "1e-3");
  const auto j = c.to_json();
  EXPECT_EQ(j["optimizer.learning_rate"].dump(), "0.001");
  EXPECT_EQ(j["optimizer.beta1"].dump(), "0.9");
  EXPECT_EQ(j["optimizer.eps"].dump(), "1e-08");
  EXPECT_EQ(train::RunConfig::from_json(j).optimizer.learning_rate, c.optimizer.learning_rate);
}

TEST(Config, FilesRefuseDuplicateAndEmptyKeysAndDirectories) {
  const auto dir = std::filesystem::temp_directory_path() / ("parallm_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto load_error = [&](const std::string& text) {
    std::ofstream(dir / "c.yaml") << text;
    train::RunConfig c;
    return error_of([&] { c.load_file((dir / "c.yaml").string()); });
  };
  EXPECT_NE(load_error("model:\n  n_layer: 3\nmodel.n_layer: 1\n").find("model.n_layer is given twice"),
            std::string::npos);
  EXPECT_NE(load_error("model:\n  dropout: ~\n").find("model.dropout has no value"), std::string::npos);
  const std::string list = load_error("model:\n  n_layer: [1, 2]\n");
  ASSERT_NE(list.find((dir / "c.yaml").string()), std::string::npos) << list;
  EXPECT_EQ(list.find((dir / "c.yaml").string()), list.rfind((dir / "c.yaml").string())) << list;  // once
  EXPECT_EQ(load_error(""), "");
  train::RunConfig c;
  EXPECT_NE(error_of([&] { c.load_file(dir.string()); }).find("is a directory"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Resume: the checkpoint's settings go on; the keys given now replace theirs,
// except the architecture's.
TEST(Config, ResumedRunsLayTheGivenKeysOverTheSavedOnes) {
  train::RunConfig saved;
  saved.apply_overrides({"model.n_layer=2", "model.batch_size=3", "model.dropout=0.1", "train.max_iters=5",
                         "train.out_dir=/old", "train.threads=16", "comm.timeout_s=60"});
  train::RunConfig now;
  now.apply_overrides({"train.init_from=resume", "train.out_dir=/new", "train.max_iters=9", "model.dropout=0"});
  std::vector<std::string> changed;
  const auto r = now.resumed_from(saved.to_json(), &changed);
  EXPECT_EQ(r.model.n_layer, 2);
  EXPECT_EQ(r.train.batch_size, 3);
  EXPECT_EQ(r.train.max_iters, 9);
  EXPECT_EQ(r.model.dropout, 0.0f);  // given, though it is the default
  EXPECT_EQ(r.train.out_dir, "/new");
  EXPECT_EQ(r.train.init_from, train::InitFrom::Resume);
  EXPECT_EQ(r.train.threads, 0);  // where and how this process runs is this invocation's
  EXPECT_EQ(r.comm.timeout_s, 300);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0], "model.dropout=0.0 (was 0.1)");
  EXPECT_EQ(changed[1], "train.max_iters=9 (was 5)");
  train::RunConfig same_arch = now;
  same_arch.set("model.n_layer", "2");
  EXPECT_NO_THROW(same_arch.resumed_from(saved.to_json(), nullptr));
  train::RunConfig other_arch = now;
  other_arch.set("model.n_layer", "4");
  const std::string e = error_of([&] { other_arch.resumed_from(saved.to_json(), nullptr); });
  EXPECT_NE(e.find("model.n_layer=4"), std::string::npos) << e;
  EXPECT_NE(e.find("model.n_layer=2"), std::string::npos) << e;
}

// Issue 44, B3: a resume keeps the checkpoint's layout keys unless it gives
// them (it took the defaults: tp 2 resumed as dp 2, pp 2 x dp 2 as dp 4, cp 2
// x tp 2 as dp 4, each with another global batch); parallel.dp is derived from
// the job's ranks; another world size that the checkpoint's degrees do not fit
// falls back to data parallelism with a warning naming both global batches;
// keys given that do not fit with the inherited ones are an error naming those.
TEST(Config, AResumeKeepsTheCheckpointsLayoutUnlessGiven) {
  struct Case {
    std::vector<std::string> saved;
    int world;
  };
  const auto layout_of = [](const train::RunConfig& c, int world) {
    return train::layout_record(c, parallel::resolve_mesh_dims(c.mesh_dims(), world, 0, true));
  };
  for (const Case& k : {Case{{"parallel.tp=2", "parallel.sequence_parallel=true"}, 2},
                        Case{{"parallel.pp=2", "parallel.pp_schedule=1f1b", "optimizer.gas=4"}, 4},
                        Case{{"parallel.cp=2", "parallel.tp=2", "parallel.cp_kind=ulysses"}, 4}}) {
    train::RunConfig saved;
    saved.apply_overrides({"model.n_head=4", "model.block_size=32", "model.batch_size=2"});
    saved.apply_overrides(k.saved);
    const nlohmann::json rec = layout_of(saved, k.world);
    train::RunConfig now;
    now.apply_overrides({"train.init_from=resume"});
    auto r = now.resumed_from(saved.to_json(), nullptr);
    const auto note = train::fit_resumed_layout(r, now, rec, k.world);
    EXPECT_EQ(note.text, "") << k.saved[0];
    EXPECT_EQ(r.mesh_dims(), saved.mesh_dims()) << k.saved[0];
    EXPECT_EQ(r.parallel.sequence_parallel, saved.parallel.sequence_parallel);
    EXPECT_EQ(r.parallel.cp_kind, saved.parallel.cp_kind);
    EXPECT_EQ(r.parallel.pp_schedule, saved.parallel.pp_schedule);
    EXPECT_EQ(layout_of(r, k.world), rec) << k.saved[0];
  }
  train::RunConfig saved;  // tp 2 on 2 ranks, 4 sequences an iteration
  saved.apply_overrides({"model.n_head=4", "model.batch_size=2", "optimizer.gas=2", "parallel.tp=2"});
  const nlohmann::json rec = layout_of(saved, 2);
  train::RunConfig now;
  now.apply_overrides({"train.init_from=resume"});
  auto r = now.resumed_from(saved.to_json(), nullptr);  // on 3 ranks, which tp 2 does not divide
  auto note = train::fit_resumed_layout(r, now, rec, 3);
  EXPECT_TRUE(note.warn);
  EXPECT_EQ(r.parallel.tp, 1);
  EXPECT_NE(note.text.find("the checkpoint's layout (dp 1 x tp 2 on 2 ranks) does not fit this job's 3 ranks"),
            std::string::npos)
      << note.text;
  EXPECT_NE(note.text.find("resuming as dp 3"), std::string::npos) << note.text;
  EXPECT_NE(note.text.find("the global batch changes from 4 to 12 sequences"), std::string::npos) << note.text;
  r = now.resumed_from(saved.to_json(), nullptr);  // on 4 ranks: tp 2 x dp 2, twice the sequences
  note = train::fit_resumed_layout(r, now, rec, 4);
  EXPECT_EQ(r.parallel.tp, 2);
  EXPECT_TRUE(note.warn);
  EXPECT_NE(note.text.find("layout dp 2 x tp 2 (the checkpoint's: dp 1 x tp 2 on 2 ranks)"), std::string::npos)
      << note.text;
  EXPECT_NE(note.text.find("from 4 to 8 sequences"), std::string::npos) << note.text;
  train::RunConfig pp;  // a key given, with the checkpoint's tp 2 kept: 4 ranks, not 2
  pp.apply_overrides({"train.init_from=resume", "parallel.pp=2"});
  r = pp.resumed_from(saved.to_json(), nullptr);
  const std::string e = error_of([&] { train::fit_resumed_layout(r, pp, rec, 2); });
  EXPECT_NE(e.find("parallel.tp=2 from the checkpoint"), std::string::npos) << e;
  train::RunConfig one;  // every layout key given as its default: the invocation's layout, said with the batch
  one.apply_overrides({"train.init_from=resume", "parallel.tp=1"});
  r = one.resumed_from(saved.to_json(), nullptr);
  note = train::fit_resumed_layout(r, one, rec, 2);
  EXPECT_EQ(r.parallel.tp, 1);
  EXPECT_NE(note.text.find("layout dp 2 (the checkpoint's: dp 1 x tp 2 on 2 ranks)"), std::string::npos) << note.text;
  // A degree out of range given on the resume of an expert-parallel checkpoint: the ConfigError naming it, not a
  // division by zero while fitting (the layout fuzzer's seed 394 at 4 ranks: SIGFPE).
  train::RunConfig ep;
  ep.apply_overrides({"model.arch=llama", "model.n_head=4", "model.moe_experts=4", "parallel.ep=2"});
  const nlohmann::json ep_rec = layout_of(ep, 2);
  train::RunConfig zero_tp;
  zero_tp.apply_overrides({"train.init_from=resume", "parallel.tp=0"});
  r = zero_tp.resumed_from(ep.to_json(), nullptr);
  const std::string e0 = error_of([&] { train::fit_resumed_layout(r, zero_tp, ep_rec, 4); });
  EXPECT_NE(e0.find("parallel.tp"), std::string::npos) << e0;
}
