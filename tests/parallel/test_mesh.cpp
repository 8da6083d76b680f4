// The device mesh (parallel/mesh.h) on 1 to 8 ranks under mpirun: for every
// factorisation of the world into (dp, tp, pp, cp), each group holds exactly
// the ranks that differ from this one only along its axes, in the documented
// order (its rank is the coordinate along them), a collective on it sums just
// those ranks, and the pipeline neighbours are the next and previous stages.
// Layouts that do not fit the world are errors naming the degrees.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/dist_run.h"
#include "parallel/mesh.h"

using namespace parallm;
using parallel::MeshCoord;
using parallel::MeshDims;
using test_util::world;

namespace {

// Every (dp, tp, pp, cp) whose product is n.
std::vector<MeshDims> factorisations(int n) {
  std::vector<MeshDims> out;
  for (int tp = 1; tp <= n; ++tp)
    for (int pp = 1; tp * pp <= n; ++pp)
      for (int cp = 1; tp * pp * cp <= n; ++cp)
        if (n % (tp * pp * cp) == 0) out.push_back({n / (tp * pp * cp), tp, pp, cp});
  return out;
}

// The world ranks of `group`, gathered in the group's rank order.
std::vector<int32_t> members(comm::Communicator& group) {
  Tensor mine = Tensor::empty({1}, DType::I32), all = Tensor::empty({group.size()}, DType::I32);
  mine.data<int32_t>()[0] = world->rank();
  group.all_gather(mine, all);
  return {all.data<int32_t>(), all.data<int32_t>() + group.size()};
}

// The group along some axes: `size` members, member k at world rank `at(k)`;
// this rank is member `pos`.
void expect_group(comm::Communicator& group, int size, int pos, const std::function<int(int)>& at,
                  const std::string& what) {
  ASSERT_EQ(group.size(), size) << what;
  EXPECT_EQ(group.rank(), pos) << what;
  std::vector<int32_t> want(static_cast<size_t>(size));
  int32_t sum = 0;
  for (int k = 0; k < size; ++k) sum += want[static_cast<size_t>(k)] = at(k);
  EXPECT_EQ(members(group), want) << what;
  Tensor t = Tensor::empty({1}, DType::I32);
  t.data<int32_t>()[0] = world->rank();
  group.all_reduce(t, comm::ReduceOp::Sum);
  EXPECT_EQ(t.data<int32_t>()[0], sum) << what;
}

TEST(Mesh, EveryFactorisationMakesTheDocumentedGroups) {
  for (const MeshDims& d : factorisations(world->size())) {
    const std::string what = fmt::format("dp={} tp={} pp={} cp={}", d.dp, d.tp, d.pp, d.cp);
    parallel::Mesh m(*world, d);
    const MeshCoord c = m.coord();
    EXPECT_EQ(m.rank_of(c), world->rank()) << what;
    EXPECT_EQ(c.tp, world->rank() % d.tp) << what;                  // tp fastest
    EXPECT_EQ(c.pp, world->rank() / (d.tp * d.cp * d.dp)) << what;  // pp outermost
    auto along = [&](auto set) {
      return [&, set](int k) {
        MeshCoord o = c;
        set(o, k);
        return m.rank_of(o);
      };
    };
    expect_group(m.tp(), d.tp, c.tp, along([](MeshCoord& o, int k) { o.tp = k; }), what + " tp");
    expect_group(m.cp(), d.cp, c.cp, along([](MeshCoord& o, int k) { o.cp = k; }), what + " cp");
    expect_group(m.dp(), d.dp, c.dp, along([](MeshCoord& o, int k) { o.dp = k; }), what + " dp");
    expect_group(m.pp(), d.pp, c.pp, along([](MeshCoord& o, int k) { o.pp = k; }), what + " pp");
    const int cp = d.cp;
    expect_group(m.dp_cp(), d.dp * d.cp, c.dp * d.cp + c.cp, along([cp](MeshCoord& o, int k) {
                   o.dp = k / cp;
                   o.cp = k % cp;
                 }),
                 what + " dp_cp");
    const int tp = d.tp;
    expect_group(m.tp_pp(), d.tp * d.pp, c.pp * d.tp + c.tp, along([tp](MeshCoord& o, int k) {
                   o.pp = k / tp;
                   o.tp = k % tp;
                 }),
                 what + " tp_pp");
    // The pipeline's ends: the first and last stage of this (dp, cp, tp) line; none on a middle stage.
    const bool end = c.pp == 0 || c.pp == d.pp - 1;
    ASSERT_EQ(m.ends() != nullptr, end) << what;
    if (end)
      expect_group(*m.ends(), d.pp > 1 ? 2 : 1, c.pp == 0 ? 0 : 1,
                   along([&d](MeshCoord& o, int k) { o.pp = k == 0 ? 0 : d.pp - 1; }), what + " ends");
    EXPECT_EQ(m.pp_prev(), c.pp == 0 ? -1 : world->rank() - d.tp * d.cp * d.dp) << what;
    EXPECT_EQ(m.pp_next(), c.pp == d.pp - 1 ? -1 : world->rank() + d.tp * d.cp * d.dp) << what;
  }
}

// Expert parallelism inside dp x cp: for every factorisation and every ep dividing dp x cp, the ep group is ep
// consecutive indices i = dp_i cp + cp_i of this (tp, pp) line, the expert-data group the indices with the same
// i % ep, and the model group tp x pp x ep (world order, rank 0 the first stage's tp 0 of ep rank 0).
TEST(Mesh, EveryExpertParallelDegreeMakesItsThreeGroups) {
  for (MeshDims d : factorisations(world->size()))
    for (int ep = 2; ep <= d.dp * d.cp; ++ep) {
      if ((d.dp * d.cp) % ep != 0) continue;
      d.ep = ep;
      const std::string what = fmt::format("dp={} tp={} pp={} cp={} ep={}", d.dp, d.tp, d.pp, d.cp, ep);
      parallel::Mesh m(*world, d);
      const MeshCoord c = m.coord();
      const int i = c.dp * d.cp + c.cp, cp = d.cp, tp = d.tp, pp = d.pp;
      auto at_index = [&, cp](int j) {
        MeshCoord o = c;
        o.dp = j / cp;
        o.cp = j % cp;
        return m.rank_of(o);
      };
      EXPECT_EQ(m.ep_rank(), i % ep) << what;
      expect_group(
          m.ep(), ep, i % ep, [&](int k) { return at_index(i / ep * ep + k); }, what + " ep");
      expect_group(
          m.edp(), d.dp * d.cp / ep, i / ep, [&](int k) { return at_index(k * ep + i % ep); }, what + " edp");
      expect_group(
          m.model(), tp * pp * ep, (c.pp * ep + i % ep) * tp + c.tp,
          [&](int k) {
            MeshCoord o = c;
            const int j = i / ep * ep + k / tp % ep;
            o.tp = k % tp;
            o.pp = k / (tp * ep);
            o.dp = j / cp;
            o.cp = j % cp;
            return m.rank_of(o);
          },
          what + " model");
    }
}

TEST(Mesh, DpIsDerivedFromTheOtherDegrees) {
  const auto d = parallel::resolve_mesh_dims({0, 2, 2, 1}, 8);
  EXPECT_EQ(d.dp, 2);
  EXPECT_EQ(parallel::resolve_mesh_dims({}, world->size()).dp, world->size());
}

TEST(Mesh, LayoutsThatDoNotFitTheWorldAreRefusedByName) {
  auto error = [](MeshDims d, int n, int per_node = 0, bool across = false) -> std::string {
    try {
      parallel::resolve_mesh_dims(d, n, per_node, across);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(
      error({0, 3, 1, 1}, 8).find("parallel.tp=3 x parallel.pp=1 x parallel.cp=1 = 3 does not divide the 8 ranks"),
      std::string::npos);
  EXPECT_NE(error({3, 2, 1, 1}, 8).find("= 6 ranks, but the job has 8"), std::string::npos);
  EXPECT_NE(error({0, 0, 1, 1}, 8).find("parallel.tp=0: every parallel degree is a positive integer"),
            std::string::npos);
  EXPECT_NE(error({0, 4, 1, 1}, 8, 2).find("parallel.tp=4 does not fit the 2 ranks of a node"), std::string::npos);
  EXPECT_EQ(error({0, 4, 1, 1}, 8, 2, true), "");  // allowed when asked for (with a warning)
  EXPECT_EQ(error({0, 2, 1, 1}, 8, 4), "");
  EXPECT_NE(error({0, 1, 1, 2, 3}, 8).find("parallel.ep=3 does not divide the 8 data x context parallel ranks"),
            std::string::npos);
  EXPECT_NE(error({0, 1, 1, 1, 0}, 8).find("parallel.ep=0: every parallel degree"), std::string::npos);
  EXPECT_EQ(error({0, 2, 1, 2, 2}, 8), "");
}

}  // namespace

int main(int argc, char** argv) {
  return parallm::test_util::dist_test_main(argc, argv);
}
