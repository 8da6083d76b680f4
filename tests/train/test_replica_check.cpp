// The replica check (train/controls/replica_check.h) under mpirun: a copy one rounding
// apart on one rank is found and named, with the group and the world ranks,
// on every rank of the group alike; copies that agree pass. The tensor-parallel
// group (a replicated LayerNorm weight) and the data-parallel replicas (every
// weight; none under ZeRO-3's shards). The pipeline's tied table is the
// layout fuzzer's (train.layout_fuzz runs every case with train.check_replicas=1,
// and its planted tied_copy_not_refreshed.patch is found there).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "comm/communicator.h"
#include "core/error.h"
#include "model/gpt.h"
#include "parallel/dist_run.h"
#include "parallel/mesh.h"
#include "parallel/tensor_parallel.h"
#include "train/controls/replica_check.h"

using namespace parallm;
using test_util::world;

namespace {

model::GPTConfig config() {
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 6;  // divisible by 1, 2, 3
  c.n_embd = 24;
  c.block_size = 8;
  c.vocab_size = 65;  // no degree divides it
  c.dropout = 0.1f;
  return c;
}

// One element of `name` moved by one rounding on the world's last rank.
void nudge_on_last_rank(model::GPT& m, const std::string& name) {
  if (world->rank() != world->size() - 1) return;
  float& x = m.params()[m.layout().find(name).offset + 1];
  x = std::nextafter(x, 2.0f * x + 1.0f);
  m.params_changed();
}

// The check's error on this rank ("" when it passed).
std::string check_error(train::ReplicaCheck& c, const model::GPT& m, int64_t it) {
  try {
    c.check(m, it);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ReplicaCheck, ATensorParallelCopyOneRoundingApartIsNamed) {
  if (world->size() < 2) GTEST_SKIP() << "needs ranks to compare";
  parallel::Mesh mesh(*world, parallel::MeshDims{.tp = world->size()});
  parallel::TensorParallelGroup tp(mesh.tp(), Device::cpu());
  model::GPT m(config(), 2, 8, Device::cpu(), {}, &tp, false);
  m.init_weights(7);
  train::ReplicaCheck check(mesh, mesh.dp(), 1, true);
  EXPECT_EQ(check_error(check, m, 0), "");
  EXPECT_EQ(check.checks(), 1);
  nudge_on_last_rank(m, "transformer.h.1.ln_2.weight");
  const std::string e = check_error(check, m, 3);  // every rank of the group, alike
  EXPECT_NE(e.find("[replicas] iteration 3: transformer.h.1.ln_2.weight differs between tensor-parallel ranks"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(fmt::format("world rank {}'s copy is not world rank 0's", world->size() - 1)), std::string::npos)
      << e;
  EXPECT_NE(e.find("1 of the"), std::string::npos) << e;
}

TEST(ReplicaCheck, ADataParallelReplicaOneRoundingApartIsNamedUnlessShardsHoldTheWeights) {
  if (world->size() < 2) GTEST_SKIP() << "needs ranks to compare";
  parallel::Mesh mesh(*world, parallel::MeshDims{});
  model::GPT m(config(), 2, 8, Device::cpu());
  m.init_weights(7);
  train::ReplicaCheck check(mesh, mesh.dp(), 2, true), shards(mesh, mesh.dp(), 1, false);
  check.after_update(m, 0);  // iteration 0 of every 2: no comparison
  EXPECT_EQ(check.checks(), 0);
  check.after_update(m, 1);
  EXPECT_EQ(check.checks(), 1);
  nudge_on_last_rank(m, "transformer.h.0.attn.c_attn.weight");
  const std::string e = check_error(check, m, 5);
  EXPECT_NE(e.find("transformer.h.0.attn.c_attn.weight differs between data-parallel replicas"), std::string::npos)
      << e;
  EXPECT_NE(e.find("bitwise equal"), std::string::npos) << e;
  EXPECT_EQ(check_error(shards, m, 5), "");  // ZeRO-3: one copy of each piece, nothing compared
}

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
