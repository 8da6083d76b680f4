// The layouts' checkpoint shares (checkpoint_share.h): runs of the whole
// tensors and where each run's data lies on its writer.
#include "parallel/checkpoint_share.h"

#include <utility>

#include "core/error.h"
#include "parallel/whole_model.h"

namespace parallm::parallel {

namespace {
const float* of(const StateBuffers& b, StatePart part) {
  return part == StatePart::Params ? b.params : part == StatePart::M ? b.m : b.v;
}
}  // namespace

CheckpointShare whole_on_one(bool here, StateBuffers whole, int64_t total) {
  CheckpointShare s;
  s.writer = here ? 0 : -1;
  s.whole_files = true;
  s.runs = {StateRun{0, 0, total}};
  s.data = [here, whole](StatePart part, size_t) { return here ? of(whole, part) : nullptr; };
  return s;
}

CheckpointShare gathered_whole(comm::Communicator& group, bool writes_group, const model::ParamLayout& part,
                               const model::ParamLayout& whole, StateBuffers mine) {
  const bool root = writes_group && group.rank() == 0;
  if (part.whole() || !writes_group) return whole_on_one(root, mine, whole.total());
  // The whole tensors on the root (each rank's part sent to it in turn).
  auto buf = std::make_shared<std::vector<float>>(root ? 3 * static_cast<size_t>(whole.total()) : 0);
  float* at[3] = {buf->data(), buf->data() + whole.total(), buf->data() + 2 * whole.total()};
  for (int k = 0; k < 3; ++k)
    gather_whole(group, part, whole, of(mine, static_cast<StatePart>(k)), root ? at[k] : nullptr);
  CheckpointShare s = whole_on_one(root, StateBuffers{at[0], at[1], at[2]}, whole.total());
  s.keep = buf;
  return s;
}

CheckpointShare own_shards(comm::Communicator& group, const model::ParamLayout& layout, StateBuffers shard) {
  PARALLM_CHECK(layout.whole(), InternalError, "checkpoint.save", "ZeRO shards of a model part are assembled");
  CheckpointShare s;
  const int n = group.size(), me = group.rank();
  s.writers = n;
  s.writer = me;
  std::vector<int64_t> local;  // where each of this rank's runs lies in its shard
  for (int r = 0; r < n; ++r) {
    int64_t size = 0;
    for (int g = 0; g < layout.num_groups(); ++g) {
      const auto p = comm::shard_of(layout.group(g).end - layout.group(g).begin, n, r);
      s.runs.push_back({r, layout.group(g).begin + p.offset, p.count});
      if (r == me) local.push_back(size);
      size += p.count;
    }
  }
  const size_t first = static_cast<size_t>(me) * static_cast<size_t>(layout.num_groups());
  s.data = [shard, local = std::move(local), first](StatePart part, size_t k) -> const float* {
    if (k < first || k >= first + local.size()) return nullptr;
    return of(shard, part) + local[k - first];
  };
  return s;
}

CheckpointShare assembled_groups(int writer, int writers, const model::ParamLayout& whole, AssembleGroup assemble) {
  PARALLM_CHECK(writers >= 1 && writer >= -1 && writer < writers, InternalError, "checkpoint.save", "writer {} of {}",
                writer, writers);
  CheckpointShare s;
  s.writers = writers;
  s.writer = writer;
  for (int g = 0; g < whole.num_groups(); ++g)
    s.runs.push_back({g % writers, whole.group(g).begin, whole.group(g).end - whole.group(g).begin});
  auto buf = std::make_shared<std::vector<float>>(writer >= 0 ? static_cast<size_t>(whole.max_group_size()) : 0);
  s.data = [writer, writers, buf, assemble = std::move(assemble)](StatePart part, size_t k) -> const float* {
    const int g = static_cast<int>(k);
    const bool mine = writer >= 0 && g % writers == writer;
    assemble(part, g, mine ? buf->data() : nullptr);
    return mine ? buf->data() : nullptr;
  };
  return s;
}

CheckpointShare zero_shards(comm::Communicator& dp, GradSync& sync, const model::ParamLayout& layout,
                            StateBuffers local) {
  // Stages 1-2: this rank's pieces of the replicated parameters, copied out; stage 3: its shard.
  auto scratch = std::make_shared<Array<float>>();
  const float* params = sync.params_to_save(*scratch);
  CheckpointShare s = own_shards(dp, layout, StateBuffers{params, local.m, local.v});
  s.keep = scratch;
  return s;
}

CheckpointShare zero_tp_groups(comm::Communicator& dp, comm::Communicator& tp, GradSync& sync,
                               const model::ParamLayout& part, const model::ParamLayout& whole, StateBuffers local) {
  const HeldState h = sync.held();
  auto group = std::make_shared<std::vector<float>>(static_cast<size_t>(part.max_group_size()));
  auto assemble = [&dp, &tp, &sync, &part, &whole, h, local, group](StatePart k, int g, float* out) {
    const int root = g % dp.size();
    const bool here = dp.rank() == root;
    const float* mine = group->data();
    if (k == StatePart::Params && !h.param_shard) {
      mine = local.params + part.group(g).begin;  // stages 1-2: every rank holds the parameters
    } else {
      const float* shard = k == StatePart::Params ? h.param_shard : of(local, k);
      sync.gather_group(shard, g, here ? group->data() : nullptr, root);
    }
    if (here) gather_whole_group(tp, part, whole, g, mine, out);
  };
  return assembled_groups(tp.rank() == 0 ? dp.rank() : -1, dp.size(), whole, assemble);
}

CheckpointShare zero_stage_whole(comm::Communicator& dp, comm::Communicator& model_group, GradSync& sync,
                                 const model::ParamLayout& part, const model::ParamLayout& whole, StateBuffers local,
                                 int ep) {
  PARALLM_CHECK(!part.whole(), InternalError, "checkpoint.save", "a pipeline stage's or ep rank's layout is a part");
  // The first ep group's ranks (dp rank 0 alone without ep) each get their part whole: the dense pieces on dp
  // rank 0, every rank's experts on it.
  const bool root = dp.rank() < ep;
  const HeldState h = sync.held();
  const size_t n = root ? static_cast<size_t>(part.total()) : 0;
  std::vector<float> wm(n), wv(n), wp(h.param_shard ? n : 0);
  for (int g = 0; g < part.num_groups(); ++g) {
    const int64_t at = part.group(g).begin;
    sync.gather_group(local.m, g, root ? wm.data() + at : nullptr, 0);
    sync.gather_group(local.v, g, root ? wv.data() + at : nullptr, 0);
    if (h.param_shard) sync.gather_group(h.param_shard, g, root ? wp.data() + at : nullptr, 0);  // stage 3
  }
  const float* params = h.param_shard ? wp.data() : local.params;
  return gathered_whole(model_group, root, part, whole, StateBuffers{params, wm.data(), wv.data()});
}

}  // namespace parallm::parallel
