#include "parallel/mesh.h"

#include "core/error.h"
#include "core/log.h"

namespace parallm::parallel {

MeshDims resolve_mesh_dims(MeshDims d, int world_size, int ranks_per_node, bool tp_across_nodes) {
  const auto check_axis = [](int v, const char* key) {
    PARALLM_CHECK(v >= 1, ConfigError, "config", "{}={}: every parallel degree is a positive integer", key, v);
  };
  check_axis(d.tp, "parallel.tp");
  check_axis(d.pp, "parallel.pp");
  check_axis(d.cp, "parallel.cp");
  check_axis(d.ep, "parallel.ep");
  const int64_t model = int64_t{d.tp} * d.pp * d.cp;  // ranks per data-parallel replica
  if (d.dp == 0) {
    PARALLM_CHECK(world_size % model == 0, ConfigError, "config",
                  "parallel.tp={} x parallel.pp={} x parallel.cp={} = {} does not divide the {} ranks: launch a "
                  "multiple of {} ranks, or change the degrees",
                  d.tp, d.pp, d.cp, model, world_size, model);
    d.dp = static_cast<int>(world_size / model);
  }
  check_axis(d.dp, "parallel.dp");
  PARALLM_CHECK(d.dp * model == world_size, ConfigError, "config",
                "parallel.dp={} x parallel.tp={} x parallel.pp={} x parallel.cp={} = {} ranks, but the job has {}: "
                "the degrees must multiply to the world size (leave parallel.dp unset to derive it)",
                d.dp, d.tp, d.pp, d.cp, d.dp * model, world_size);
  PARALLM_CHECK(
      (int64_t{d.dp} * d.cp) % d.ep == 0, ConfigError, "config",
      "parallel.ep={} does not divide the {} data x context parallel ranks (parallel.dp={} x parallel.cp={}): "
      "expert parallelism splits those ranks into groups of parallel.ep",
      d.ep, d.dp * d.cp, d.dp, d.cp);
  if (ranks_per_node > 0 && d.tp > 1 && (d.tp > ranks_per_node || ranks_per_node % d.tp != 0)) {
    PARALLM_CHECK(tp_across_nodes, ConfigError, "config",
                  "parallel.tp={} does not fit the {} ranks of a node: tensor parallelism exchanges activations in "
                  "every layer and belongs inside a node (set parallel.tp_across_nodes=true to allow it anyway)",
                  d.tp, ranks_per_node);
    log::warn(
        "parallel.tp={} spans nodes ({} ranks per node): every layer's tensor-parallel exchange crosses the "
        "network",
        d.tp, ranks_per_node);
  }
  return d;
}

Mesh::Mesh(comm::Communicator& world, MeshDims dims, int ranks_per_node, bool tp_across_nodes)
    : world_(world), dims_(resolve_mesh_dims(dims, world.size(), ranks_per_node, tp_across_nodes)) {
  me_ = coord_of(world.rank());
  const MeshDims& d = dims_;
  const MeshCoord& c = me_;
  // color: the coordinates the group's ranks share; key: the position along the group's axes.
  tp_ = group(d.tp, (c.pp * d.dp + c.dp) * d.cp + c.cp, c.tp, "tp");
  cp_ = group(d.cp, (c.pp * d.dp + c.dp) * d.tp + c.tp, c.cp, "cp");
  dp_ = group(d.dp, (c.pp * d.cp + c.cp) * d.tp + c.tp, c.dp, "dp");
  pp_ = group(d.pp, (c.dp * d.cp + c.cp) * d.tp + c.tp, c.pp, "pp");
  dp_cp_ = group(d.dp * d.cp, c.pp * d.tp + c.tp, c.dp * d.cp + c.cp, "dp_cp");
  tp_pp_ = group(d.tp * d.pp, c.dp * d.cp + c.cp, c.pp * d.tp + c.tp, "tp_pp");
  if (d.ep > 1) {  // i: the index in the dp x cp group; ep groups are consecutive indices
    const int i = c.dp * d.cp + c.cp, line = c.pp * d.tp + c.tp, groups = d.dp * d.cp / d.ep;
    ep_ = group(d.ep, line * groups + i / d.ep, i % d.ep, "ep");
    edp_ = group(groups, line * d.ep + i % d.ep, i / d.ep, "edp");
    model_ = group(d.tp * d.pp * d.ep, i / d.ep, (c.pp * d.ep + i % d.ep) * d.tp + c.tp, "model");  // world order
  }
  if (d.pp > 1) {  // every rank takes part in the split; the middle stages are left out
    const bool end = first_stage() || last_stage();
    ends_ = group(2, end ? (c.dp * d.cp + c.cp) * d.tp + c.tp : -1, c.pp, "ends");
  }
}

Mesh::Group Mesh::group(int size, int color, int key, const std::string& name) {
  // A group spanning the world is the world itself (the other axes have size
  // one, so its order is the world's): nothing new to make, and a mesh of
  // data parallelism alone communicates exactly as the world does.
  if (size == world_.size()) return {&world_};
  // A group of one rank needs no collective: it is made on first use.
  if (size == 1) return {};
  owned_.push_back(world_.split(color, key, name));
  if (!owned_.back()) {  // this rank is not in any group of this kind (color < 0)
    owned_.pop_back();
    return {};
  }
  return {owned_.back().get()};
}

comm::Communicator& Mesh::get(Group& g) const {
  if (!g.comm) {
    owned_.push_back(comm::make_world("self", world_.options()));
    g.comm = owned_.back().get();
  }
  return *g.comm;
}

MeshCoord mesh_coord(const MeshDims& d, int r) {
  MeshCoord c;
  c.tp = r % d.tp;
  r /= d.tp;
  c.cp = r % d.cp;
  r /= d.cp;
  c.dp = r % d.dp;
  c.pp = r / d.dp;
  return c;
}

std::string coord_text(const MeshDims& d, const MeshCoord& c) {
  return fmt::format("[dp {}/{} tp {}/{} pp {}/{} cp {}/{}]", c.dp, d.dp, c.tp, d.tp, c.pp, d.pp, c.cp, d.cp);
}

MeshCoord Mesh::coord_of(int r) const {
  return mesh_coord(dims_, r);
}

int Mesh::rank_of(const MeshCoord& c) const {
  const MeshDims& d = dims_;
  return ((c.pp * d.dp + c.dp) * d.cp + c.cp) * d.tp + c.tp;
}

int Mesh::pp_prev() const {
  if (first_stage()) return -1;
  MeshCoord c = me_;
  --c.pp;
  return rank_of(c);
}

int Mesh::pp_next() const {
  if (last_stage()) return -1;
  MeshCoord c = me_;
  ++c.pp;
  return rank_of(c);
}

std::string Mesh::summary() const {
  return fmt::format("dp={} tp={} pp={} cp={}{}", dims_.dp, dims_.tp, dims_.pp, dims_.cp,
                     dims_.ep > 1 ? fmt::format(" ep={}", dims_.ep) : "");
}

}  // namespace parallm::parallel
