// The device mesh: the world's ranks arranged on four axes, data (dp),
// tensor (tp), pipeline (pp) and context (cp) parallel, in Megatron's order:
// tp varies fastest (tp ranks are neighbours, so on one node), then cp, then
// dp, and pp is outermost:
//   rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i
// One Mesh validates the layout and makes every group once (with
// Communicator::split); everything else asks it for a group, a coordinate or
// a neighbour by name and never computes one itself (picotron's process-group
// manager and torchtitan's ParallelDims have this shape).
// Groups: tp, cp, dp, pp (the ranks differing only along that axis),
// dp x cp (the ranks holding the same model shard: gradient reduction), tp x
// pp (the ranks holding one whole model between them: the gradient norm, a
// checkpoint's assembly) and the pipeline's two ends (the first and last
// stage, which both hold the tied token table). Expert parallelism (ep, as
// Megatron places it) splits the dp x cp ranks of each (tp, pp) line: their
// index i = dp_i * cp + cp_i gives the ep group (ep consecutive indices,
// which exchange tokens and hold one set of experts between them: ep rank
// i % ep), the expert-data group (the same i % ep: the ranks holding the same
// experts, whose gradients they reduce) and the model group (tp x pp x ep:
// one whole model between them, with experts). Each
// group orders its ranks by their coordinate along its axes. A group that
// spans the world is the world communicator itself (data parallelism alone
// runs exactly as before the mesh existed); a group of one rank is a local
// self communicator, made without a collective the first time it is asked
// for (no thread or NCCL communicator for an axis of degree one).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace parallm::parallel {

struct MeshDims {
  int dp = 0;  // 0: the world size / (tp * pp * cp)
  int tp = 1;
  int pp = 1;
  int cp = 1;
  int ep = 1;  // expert parallel: inside the dp x cp ranks (not an axis of its own; it must divide dp * cp)
  bool operator==(const MeshDims&) const = default;
};

struct MeshCoord {
  int dp = 0, tp = 0, pp = 0, cp = 0;
};

class Mesh {
 public:
  // Collective over `world`. `ranks_per_node` (0 = unknown) bounds tp: a tp
  // group must lie inside one node unless `tp_across_nodes` (then a warning).
  // ConfigError naming the problem for a layout that does not fit the world.
  Mesh(comm::Communicator& world, MeshDims dims, int ranks_per_node = 0, bool tp_across_nodes = false);

  const MeshDims& dims() const { return dims_; }
  // This rank's coordinates, and any world rank's.
  const MeshCoord& coord() const { return me_; }
  MeshCoord coord_of(int world_rank) const;
  int rank_of(const MeshCoord& c) const;

  comm::Communicator& world() const { return world_; }
  comm::Communicator& dp() const { return get(dp_); }
  comm::Communicator& tp() const { return get(tp_); }
  comm::Communicator& pp() const { return get(pp_); }
  comm::Communicator& cp() const { return get(cp_); }
  comm::Communicator& dp_cp() const { return get(dp_cp_); }  // same model shard: gradients are reduced here
  comm::Communicator& tp_pp() const { return get(tp_pp_); }  // one whole model between them (without ep)
  // Expert parallelism (groups of one rank when ep = 1): the ranks exchanging
  // tokens, those holding the same experts, and tp x pp x ep (one whole model
  // with every expert between them: a checkpoint's assembly, the gradient norm).
  comm::Communicator& ep() const { return get(ep_); }
  comm::Communicator& edp() const { return get(edp_); }
  comm::Communicator& model() const { return dims_.ep > 1 ? get(model_) : tp_pp(); }
  int ep_rank() const { return (me_.dp * dims_.cp + me_.cp) % dims_.ep; }
  // The first and last pipeline stage of this rank's (dp, cp, tp) line, the
  // first as rank 0 (a group of one without a pipeline); nullptr on a middle stage.
  comm::Communicator* ends() const { return first_stage() || last_stage() ? &get(ends_) : nullptr; }

  // Pipeline neighbours (world ranks), -1 at either end; and the ends.
  int pp_prev() const;
  int pp_next() const;
  bool first_stage() const { return me_.pp == 0; }
  bool last_stage() const { return me_.pp == dims_.pp - 1; }

  // "dp=2 tp=1 pp=1 cp=1", for the run's log (coord_text below gives a rank's coordinates).
  std::string summary() const;

 private:
  comm::Communicator& world_;
  MeshDims dims_;
  MeshCoord me_;
  struct Group {
    comm::Communicator* comm = nullptr;  // null: a group of this rank alone, not made yet
  };
  // Collective over the world: a group of `size` ranks made by split, the
  // world when it spans it, or (one rank) nothing until first used.
  Group group(int size, int color, int key, const std::string& name);
  comm::Communicator& get(Group& g) const;  // makes a one-rank group (a local self communicator) on first use
  mutable Group dp_, tp_, pp_, cp_, dp_cp_, tp_pp_, ends_, ep_, edp_, model_;
  mutable std::vector<std::unique_ptr<comm::Communicator>> owned_;
};

// Rank r's coordinates on a mesh of (resolved) `dims`, and their text
// "[dp 1/2 tp 0/1 pp 0/1 cp 0/1]" (no communication: for the dist info).
MeshCoord mesh_coord(const MeshDims& dims, int rank);
std::string coord_text(const MeshDims& dims, const MeshCoord& c);

// The dims with dp filled in, checked against a world of `world_size` ranks
// (ConfigError naming the sizes otherwise, and an ep that does not divide
// dp x cp); no communication.
MeshDims resolve_mesh_dims(MeshDims dims, int world_size, int ranks_per_node = 0, bool tp_across_nodes = false);

}  // namespace parallm::parallel
