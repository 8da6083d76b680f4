#include "parallel/whole_model.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "parallel/group_ops.h"

namespace parallm::parallel {

void gather_whole(comm::Communicator& tp, const model::ParamLayout& part, const model::ParamLayout& whole,
                  const float* mine, float* out) {
  PARALLM_CHECK(tp.size() % part.spec().tp == 0, InternalError, "parallel.tp",
                "a layout for tp={} gathered over a group of {}", part.spec().tp, tp.size());
  // This rank's elements in the whole tensor's order: runs (whole offset,
  // count) and their values. Replicated slots come from tp rank 0 alone, the
  // tied table from the stage that owns it, every slot but the experts' from
  // ep rank 0 (expert parallel: the group spans ep); every element from one rank.
  std::vector<int64_t> runs;
  std::vector<float> vals;
  const model::ShardSpec& spec = part.spec();
  for (int s = 0; s < part.num_units(); ++s) {
    const model::ParamSlot& ps = part.slots()[s];
    if (ps.tied_copy || (!ps.expert_split && spec.ep_rank != 0) || (!ps.placement.sharded() && spec.rank != 0))
      continue;
    const int64_t base = whole.slots()[static_cast<size_t>(ps.global_index)].offset;
    for (const auto& r : part.whole_runs(s, 0, ps.numel)) {
      if (r.whole < 0) continue;  // padding rows
      runs.push_back(base + r.whole);
      runs.push_back(r.count);
      vals.insert(vals.end(), mine + ps.offset + r.local, mine + ps.offset + r.local + r.count);
    }
  }
  auto i64_view = [](std::vector<int64_t>& v) {  // int64 as pairs of int32 words, exact
    return Tensor::view_of(v.data(), {static_cast<int64_t>(v.size()) * 2}, DType::I32);
  };
  auto f32_view = [](std::vector<float>& v) {
    return Tensor::view_of(v.data(), {static_cast<int64_t>(v.size())}, DType::F32);
  };
  if (tp.rank() != 0) {  // to the root (one tag: a pair keeps its order), which takes one rank at a time
    std::vector<int64_t> sizes = {static_cast<int64_t>(runs.size()), static_cast<int64_t>(vals.size())};
    tp.send(i64_view(sizes), 0);
    if (!runs.empty()) tp.send(i64_view(runs), 0);
    if (!vals.empty()) tp.send(f32_view(vals), 0);
    return;
  }
  std::fill(out, out + whole.total(), 0.0f);  // alignment padding
  auto place = [&](const std::vector<int64_t>& rs, const std::vector<float>& vs) {
    size_t at = 0;
    for (size_t k = 0; k + 1 < rs.size(); k += 2) {
      std::copy_n(vs.data() + at, rs[k + 1], out + rs[k]);
      at += static_cast<size_t>(rs[k + 1]);
    }
  };
  place(runs, vals);
  for (int r = 1; r < tp.size(); ++r) {
    std::vector<int64_t> sizes(2);
    tp.recv(i64_view(sizes), r);
    runs.assign(static_cast<size_t>(sizes[0]), 0);
    vals.assign(static_cast<size_t>(sizes[1]), 0.0f);
    if (!runs.empty()) tp.recv(i64_view(runs), r);
    if (!vals.empty()) tp.recv(f32_view(vals), r);
    place(runs, vals);
  }
}

void slice_whole(const model::ParamLayout& part, const model::ParamLayout& whole, const float* in, float* mine) {
  for (int s = 0; s < static_cast<int>(part.slots().size()); ++s)
    part.slice(s, in + whole.slots()[static_cast<size_t>(part.slots()[s].global_index)].offset,
               mine + part.slots()[s].offset);
}

void gather_whole_group(comm::Communicator& tp, const model::ParamLayout& part, const model::ParamLayout& whole, int g,
                        const float* mine, float* out) {
  PARALLM_CHECK(part.spec().tp == tp.size() && part.num_groups() == whole.num_groups(), InternalError, "parallel.tp",
                "a layout for tp={} gathered over a group of {}", part.spec().tp, tp.size());
  const model::ParamLayout::Range pg = part.group(g), wg = whole.group(g);
  const int64_t n = pg.end - pg.begin, ranks = tp.size();
  const bool root = tp.rank() == 0;
  PARALLM_CHECK(!root || out, InternalError, "parallel.tp", "the root needs the whole group's buffer");
  std::vector<float> parts(root ? static_cast<size_t>(ranks * n) : 0);
  tp.gather(Tensor::view_of(const_cast<float*>(mine), {n}, DType::F32),
            root ? Tensor::view_of(parts.data(), {ranks * n}, DType::F32) : Tensor(), 0, ranks * n);
  if (!root) return;
  std::fill(out, out + (wg.end - wg.begin), 0.0f);  // alignment padding
  for (int s = 0; s < part.num_units(); ++s) {
    const model::ParamSlot& ps = part.slots()[s];
    if (ps.offset < pg.begin || ps.offset >= pg.end) continue;
    for (int r = 0; r < (ps.placement.sharded() ? ranks : 1); ++r)  // replicated slots from rank 0
      part.place(s, parts.data() + r * n + (ps.offset - pg.begin), out + (whole.slots()[s].offset - wg.begin), r);
  }
}

}  // namespace parallm::parallel
