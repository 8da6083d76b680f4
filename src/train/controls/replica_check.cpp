#include "train/controls/replica_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/gpu.h"

namespace parallm::train {

namespace {

// The 64-bit FNV-1a hash of n floats' bits (on the host).
uint64_t hash_floats(const float* x, int64_t n) {
  uint64_t h = 14695981039346656037ull;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t w = 0;
    std::memcpy(&w, x + i, sizeof w);
    h = (h ^ w) * 1099511628211ull;
  }
  return h;
}

// The wanted slots' hashes, read from the device where the model lives.
std::vector<uint64_t> slot_hashes(const model::GPT& m, const std::vector<bool>& wanted) {
  const auto& slots = m.layout().slots();
  std::vector<uint64_t> out(slots.size());
  std::vector<float> host;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!wanted[i]) continue;
    const float* p = m.params() + slots[i].offset;
    if (!m.device().is_cpu()) {
      host.resize(static_cast<size_t>(slots[i].numel));
      gpu::memcpy_d2h(host.data(), p, host.size() * sizeof(float));
      p = host.data();
    }
    out[i] = hash_floats(p, slots[i].numel);
  }
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

ReplicaCheck::ReplicaCheck(const parallel::Mesh& mesh, comm::Communicator& replicas, int64_t interval, bool whole_model)
    : world_rank_(mesh.world().rank()),
      interval_(interval),
      whole_model_(whole_model),
      mesh_(mesh),
      replicas_(replicas) {
  PARALLM_CHECK(interval > 0, InternalError, "replicas", "a replica check every {} iterations", interval);
}

void ReplicaCheck::after_update(const model::GPT& m, int64_t it) {
  if ((it + 1) % interval_ == 0) check(m, it);
}

void ReplicaCheck::check(const model::GPT& m, int64_t it) {
  if (!m.params()) return;  // ZeRO-3: the weights live in their shards, one copy each
  const auto& slots = m.layout().slots();
  std::vector<Group> groups{{&mesh_.tp(), "tensor-parallel ranks", {}}};
  for (size_t i = 0; i < slots.size(); ++i)
    if (!slots[i].placement.sharded() && !slots[i].tied_copy) groups.back().slots.push_back(i);
  if (whole_model_) {  // expert parallel: each expert over the ranks holding it, the rest over every replica
    const bool ep = mesh_.dims().ep > 1;
    groups.push_back({&replicas_, "data-parallel replicas", {}});
    for (size_t i = 0; i < slots.size(); ++i)
      if (!ep || !slots[i].expert_split) groups.back().slots.push_back(i);
    if (ep) {
      groups.push_back({&mesh_.edp(), "expert-data-parallel replicas", {}});
      for (size_t i = 0; i < slots.size(); ++i)
        if (slots[i].expert_split) groups.back().slots.push_back(i);
    }
  }
  comm::Communicator* ends = mesh_.ends();
  if (ends && m.config().tie_embeddings) {  // an untied head has no copy on the first stage
    groups.push_back({ends, "the pipeline's first and last stage", {}});
    for (size_t i = 0; i < slots.size(); ++i)
      if (m.layout().wte() == slots[i].offset) groups.back().slots.push_back(i);
  }
  // Only the tensors some group of several ranks compares are read.
  std::vector<bool> wanted(slots.size(), false);
  for (const Group& g : groups)
    if (g.comm->size() > 1)
      for (size_t i : g.slots) wanted[i] = true;
  const std::vector<uint64_t> hashes = slot_hashes(m, wanted);
  for (const Group& g : groups) compare(g, m, hashes, it);
  ++checks_;
}

// Every rank of the group gathers every rank's (world rank, hashes) and finds
// the same first difference, so they all throw alike.
void ReplicaCheck::compare(const Group& g, const model::GPT& m, const std::vector<uint64_t>& hashes, int64_t it) const {
  comm::Communicator& c = *g.comm;
  if (c.size() == 1 || g.slots.empty()) return;
  const int64_t words = 2 + 2 * static_cast<int64_t>(g.slots.size());
  Tensor mine = Tensor::empty({words}, DType::I32), all = Tensor::empty({words * c.size()}, DType::I32);
  auto* w = mine.data<int32_t>();
  w[0] = world_rank_;
  w[1] = 0;
  for (size_t j = 0; j < g.slots.size(); ++j) std::memcpy(w + 2 + 2 * j, &hashes[g.slots[j]], sizeof(uint64_t));
  c.all_gather(mine, all);
  const int32_t* a = all.data<int32_t>();
  auto hash_of = [&](int r, size_t j) {
    uint64_t h = 0;
    std::memcpy(&h, a + r * words + 2 + 2 * static_cast<int64_t>(j), sizeof h);
    return h;
  };
  size_t differing = 0, first = g.slots.size();
  for (size_t j = 0; j < g.slots.size(); ++j)
    for (int r = 1; r < c.size(); ++r)
      if (hash_of(r, j) != hash_of(0, j)) {
        differing += 1;
        first = std::min(first, j);
        break;
      }
  if (differing == 0) return;
  std::vector<int> apart;  // world ranks whose copy differs from the group's first rank's
  for (int r = 1; r < c.size(); ++r)
    if (hash_of(r, first) != hash_of(0, first)) apart.push_back(a[r * words]);
  const std::string who = apart.size() == 1 ? fmt::format("world rank {}'s copy is", apart[0])
                                            : fmt::format("world ranks {}'s copies are", rank_list(apart));
  throw InternalError(
      "replicas",
      fmt::format("iteration {}: {} differs between {}: {} not world rank {}'s ({} of the {} "
                  "tensor(s) compared there differ). Copies that ranks hold alike must stay bitwise "
                  "equal; these drifted apart through a bug in how they are updated, or a fault of "
                  "the hardware (train.check_replicas)",
                  it, m.layout().slots()[g.slots[first]].name, g.what, who, a[0], differing, g.slots.size()));
}

}  // namespace parallm::train
