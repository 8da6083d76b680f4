// Every collective against a serial reference, run on 1..5 ranks through
// mpirun (see tests/CMakeLists.txt): counts 0, 1 and not divisible by the
// group size, each dtype, sub-groups, asynchronous handles, argument errors;
// all_to_all_v with uneven and empty counts, and counts the ranks disagree on.
// Each rank can compute every rank's input, so each checks its own result.
// With the nccl backend (CUDA builds) the same tests move host tensors
// through NCCL's staging.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/gpu.h"
#include "world_main.h"

namespace parallm::comm {
// Failures print counts as text ("all_reduce 3 calls 124 B").
void PrintTo(const OpCounts& c, std::ostream* os) {
  *os << c.text();
}
}  // namespace parallm::comm

using namespace parallm;
using namespace parallm::comm;

namespace {

Communicator* world = nullptr;

// Small integers: exact in every dtype and in any summation order.
int64_t value(int rank, int64_t i, DType t) {
  const int64_t v = (rank * 7 + i * 3) % 11;
  return t == DType::U16 ? v : v - 5;
}

Tensor make(DType t, int64_t n) {
  return Tensor::empty({n}, t);
}

void set(Tensor& x, int64_t i, double v) {
  switch (x.dtype()) {
    case DType::F32:
      x.data<float>()[i] = static_cast<float>(v);
      break;
    case DType::BF16:
      x.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v));
      break;
    case DType::I32:
      x.data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::U16:
      x.data<uint16_t>()[i] = static_cast<uint16_t>(v);
      break;
  }
}

double get(const Tensor& x, int64_t i) {
  switch (x.dtype()) {
    case DType::F32:
      return x.data<float>()[i];
    case DType::BF16:
      return bf16_to_f32(x.data<uint16_t>()[i]);
    case DType::I32:
      return x.data<int32_t>()[i];
    case DType::U16:
      return x.data<uint16_t>()[i];
  }
  return 0;
}

Tensor input(DType t, int64_t n, int rank, int64_t offset = 0) {
  Tensor x = make(t, n);
  for (int64_t i = 0; i < n; ++i) set(x, i, static_cast<double>(value(rank, offset + i, t)));
  return x;
}

double reduce_ref(ReduceOp op, int64_t i, DType t, int n) {
  double acc = static_cast<double>(value(0, i, t));
  for (int r = 1; r < n; ++r) {
    const double v = static_cast<double>(value(r, i, t));
    acc = op == ReduceOp::Min ? std::min(acc, v) : op == ReduceOp::Max ? std::max(acc, v) : acc + v;
  }
  return op == ReduceOp::Avg ? acc / n : acc;
}

const DType kTypes[] = {DType::F32, DType::BF16, DType::I32, DType::U16};

std::vector<int64_t> counts() {
  const int64_t n = world->size();
  return {0, 1, 7, 3 * n + 1, 1001};
}

bool is_float(DType t) {
  return t == DType::F32 || t == DType::BF16;
}

double tol(DType t, double v) {
  return t == DType::BF16 ? std::abs(v) / 128 + 1e-6 : 1e-6;
}

}  // namespace

TEST(Collectives, AllReduceEveryOpDtypeAndCount) {
  const int n = world->size();
  for (DType t : kTypes)
    for (int64_t c : counts())
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max}) {
        if (op == ReduceOp::Avg && !is_float(t)) continue;
        Tensor x = input(t, c, world->rank());
        world->all_reduce(x, op);
        for (int64_t i = 0; i < c; ++i) {
          const double want = reduce_ref(op, i, t, n);
          ASSERT_NEAR(get(x, i), want, tol(t, want)) << dtype_name(t) << " " << reduce_op_name(op) << " count " << c;
        }
      }
}

TEST(Collectives, ReduceAndBroadcastToEveryRoot) {
  const int n = world->size(), me = world->rank();
  for (DType t : kTypes)
    for (int64_t c : counts())
      for (int root = 0; root < n; ++root) {
        Tensor x = input(t, c, me);
        world->reduce(x, ReduceOp::Sum, root);
        for (int64_t i = 0; i < c; ++i) {
          const double want = me == root ? reduce_ref(ReduceOp::Sum, i, t, n) : value(me, i, t);
          ASSERT_NEAR(get(x, i), want, tol(t, want)) << "reduce " << dtype_name(t) << " root " << root;
        }
        Tensor y = input(t, c, me);
        world->broadcast(y, root);
        for (int64_t i = 0; i < c; ++i) ASSERT_EQ(get(y, i), value(root, i, t)) << "broadcast root " << root;
      }
}

TEST(Collectives, GatherLikeWithUnevenShards) {
  const int n = world->size(), me = world->rank();
  for (DType t : kTypes)
    for (int64_t c : counts()) {
      // Element i of the whole belongs to the rank whose shard holds it, and has value(owner, i).
      auto owner_value = [&](int64_t i) {
        for (int r = 0; r < n; ++r) {
          Shard s = shard_of(c, n, r);
          if (i >= s.offset && i < s.offset + s.count) return value(r, i, t);
        }
        return int64_t{-999};
      };
      const Shard mine = shard_of(c, n, me);
      Tensor out = make(t, c);
      world->all_gather(input(t, mine.count, me, mine.offset), out);
      for (int64_t i = 0; i < c; ++i) ASSERT_EQ(get(out, i), owner_value(i)) << "all_gather count " << c;
      // In place: the input is this rank's own part of the output.
      Tensor whole = make(t, c);
      for (int64_t i = 0; i < mine.count; ++i)
        set(whole, mine.offset + i, static_cast<double>(value(me, mine.offset + i, t)));
      world->all_gather(whole.slice_view(mine.offset, {mine.count}), whole);
      for (int64_t i = 0; i < c; ++i) ASSERT_EQ(get(whole, i), owner_value(i)) << "in-place all_gather count " << c;

      const int root = n - 1;
      Tensor g = me == root ? make(t, c) : Tensor();
      world->gather(input(t, mine.count, me, mine.offset), g, root, c);
      if (me == root) {
        for (int64_t i = 0; i < c; ++i) ASSERT_EQ(get(g, i), owner_value(i)) << "gather count " << c;
      }

      Tensor part = make(t, mine.count);
      world->scatter(me == root ? input(t, c, root) : Tensor(), part, root, c);
      for (int64_t i = 0; i < mine.count; ++i)
        ASSERT_EQ(get(part, i), value(root, mine.offset + i, t)) << "scatter count " << c;

      Tensor rs = make(t, mine.count);
      world->reduce_scatter(input(t, c, me), rs, ReduceOp::Sum);
      for (int64_t i = 0; i < mine.count; ++i) {
        const double want = reduce_ref(ReduceOp::Sum, mine.offset + i, t, n);
        ASSERT_NEAR(get(rs, i), want, tol(t, want)) << "reduce_scatter count " << c;
      }
    }
}

TEST(Collectives, AllToAllMovesBlocksAndRejectsUnevenCounts) {
  const int n = world->size(), me = world->rank();
  for (DType t : kTypes)
    for (int64_t per : {0, 1, 5}) {
      // Rank r's block j holds 1000*r + 10*j + e: what rank j must receive from r.
      Tensor in = make(t, per * n), out = make(t, per * n);
      for (int j = 0; j < n; ++j)
        for (int64_t e = 0; e < per; ++e) set(in, j * per + e, (t == DType::BF16 ? 1 : 100) * me + 10 * j + e);
      world->all_to_all(in, out);
      for (int r = 0; r < n; ++r)
        for (int64_t e = 0; e < per; ++e)
          ASSERT_EQ(get(out, r * per + e), (t == DType::BF16 ? 1 : 100) * r + 10 * me + e) << dtype_name(t);
    }
  if (n > 1) {
    Tensor in = make(DType::F32, n + 1), out = make(DType::F32, n + 1);
    try {
      world->all_to_all(in, out);
      FAIL() << "expected an error";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("not divisible by " + std::to_string(n)), std::string::npos) << e.what();
    }
  }
}

namespace {

// all_to_all_v's test pattern: element e of what rank i sends rank j, exact in every dtype.
double a2av_value(int i, int j, int64_t e, DType t) {
  if (t == DType::BF16) return static_cast<double>((i * 37 + j * 11 + e * 3) % 255 - 127);
  if (t == DType::U16) return static_cast<double>((i * 37 + j * 11 + e * 3) % 60000);
  return static_cast<double>(i * 100000 + j * 1000 + e % 1000) * (e % 2 ? -1 : 1);
}

// Runs all_to_all_v with rank i sending count(i, j) elements to rank j on `c`, and checks
// every received element, and that the tails of `in` and `out` past the counts are untouched.
void check_all_to_all_v(Communicator& c, DType t, const std::function<int64_t(int, int)>& count, bool async,
                        const std::string& what) {
  const int n = c.size(), me = c.rank();
  std::vector<int64_t> send(n), recv(n);
  int64_t sent = 0, received = 0;
  for (int j = 0; j < n; ++j) {
    send[j] = count(me, j);
    recv[j] = count(j, me);
    sent += send[j];
    received += recv[j];
  }
  const int64_t spare = 3;  // the tensors may be larger than the counts need
  const double sentinel = t == DType::U16 ? 77 : -77;
  Tensor in = make(t, sent + spare), out = make(t, received + spare);
  int64_t k = 0;
  for (int j = 0; j < n; ++j)
    for (int64_t e = 0; e < send[j]; ++e) set(in, k++, a2av_value(me, j, e, t));
  for (int64_t e = 0; e < spare; ++e) set(in, sent + e, sentinel);
  for (int64_t e = 0; e < received + spare; ++e) set(out, e, sentinel);
  if (async) {
    auto w = c.all_to_all_v_async(in, send, out, recv);
    w->wait();
    EXPECT_TRUE(w->test());
  } else {
    c.all_to_all_v(in, send, out, recv);
  }
  k = 0;
  for (int i = 0; i < n; ++i)
    for (int64_t e = 0; e < recv[i]; ++e, ++k)
      ASSERT_EQ(get(out, k), a2av_value(i, me, e, t))
          << what << " " << dtype_name(t) << ": element " << e << " from rank " << i << " on rank " << me;
  for (int64_t e = 0; e < spare; ++e) {
    ASSERT_EQ(get(out, received + e), sentinel) << what << ": the output's tail was written";
    ASSERT_EQ(get(in, sent + e), sentinel) << what << ": the input's tail changed";
  }
}

}  // namespace

TEST(Collectives, AllToAllVUnevenCountsWithZeros) {
  const int n = world->size();
  struct Pattern {
    const char* name;
    std::function<int64_t(int, int)> count;
  };
  const std::vector<Pattern> patterns = {
      // Uneven, with zeros scattered; rank 0 sends nothing to anyone and rank n - 1 receives nothing
      // (with one rank both: the whole exchange is empty).
      {"uneven", [n](int i, int j) { return i == 0 || j == n - 1 ? int64_t{0} : int64_t{(i * 3 + j * 5) % 4}; }},
      {"all ones but one", [](int i, int j) { return int64_t{i == 1 && j == 0 ? 0 : 1 + (i + 2 * j) % 3}; }},
      {"all empty", [](int, int) { return int64_t{0}; }},
      // Large enough for the libraries' rendezvous protocols, and different per direction.
      {"large", [](int i, int j) { return int64_t{40000 + 1000 * i - 300 * j}; }},
  };
  for (DType t : kTypes)
    for (const Pattern& p : patterns)
      for (bool async : {false, true}) check_all_to_all_v(*world, t, p.count, async, p.name);
  // In a sub-group (ranks reordered) as expert parallelism would use it.
  auto sub = world->split(0, -world->rank(), "a2av-reversed");
  ASSERT_TRUE(sub);
  check_all_to_all_v(*sub, DType::F32, patterns[0].count, false, "sub-group");
}

TEST(Collectives, AllToAllVBadCountsAreShapeErrors) {
  const int n = world->size(), me = world->rank();
  const OpCounts before = world->counts();
  Tensor in = make(DType::F32, 2 * n), out = make(DType::F32, 2 * n);
  const std::vector<int64_t> twos(n, 2);
  auto expect_shape_error = [&](const Tensor& a, std::vector<int64_t> s, const Tensor& b, std::vector<int64_t> r,
                                const std::string& text) {
    try {
      world->all_to_all_v(a, std::move(s), b, std::move(r));
      ADD_FAILURE() << "expected an error: " << text;
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("[comm.all_to_all_v]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(me) + "/" + std::to_string(n)), std::string::npos)
          << e.what();
    }
  };
  std::vector<int64_t> more(n + 1, 0), fewer(n > 1 ? n - 1 : 0, 0);
  expect_shape_error(in, more, out, twos, "send_counts has " + std::to_string(n + 1) + " entries");
  expect_shape_error(in, twos, out, fewer, "recv_counts has " + std::to_string(fewer.size()) + " entries");
  std::vector<int64_t> negative = twos;
  negative[n - 1] = -1;
  expect_shape_error(in, negative, out, twos, "send_counts[" + std::to_string(n - 1) + "] is -1");
  expect_shape_error(in, twos, out, negative, "recv_counts[" + std::to_string(n - 1) + "] is -1");
  std::vector<int64_t> too_many = twos;
  too_many[0] = 3;
  expect_shape_error(in, too_many, out, twos, "send_counts add up to more than the " + std::to_string(2 * n));
  expect_shape_error(in, twos, out, too_many, "recv_counts add up to more than the " + std::to_string(2 * n));
  expect_shape_error(in, twos, make(DType::I32, 2 * n), twos, "input is fp32 but output is int32");
  // A rejected call counts nothing, and the group still works.
  EXPECT_EQ(world->counts(), before);
  world->all_to_all_v(in, twos, out, twos);
}

TEST(Collectives, AllToAllVDisagreeingCountsAreErrorsOnEveryRank) {
  const int n = world->size(), me = world->rank();
  ASSERT_TRUE(world->options().check_ops);
  // A group of its own: the error breaks it, the world goes on.
  auto g = world->split(0, me, "a2av-mismatch");
  ASSERT_TRUE(g);
  const int peer = 1 % n;
  std::vector<int64_t> send(n, 2), recv(n, 2);
  if (me == 0) send[peer] = 3;  // rank `peer` expects 2
  Tensor in = make(DType::BF16, 3 * n), out = make(DType::BF16, 3 * n);
  try {
    g->all_to_all_v(in, send, out, recv);
    FAIL() << "expected an error";
  } catch (const CommError& e) {
    const std::string want =
        "all_to_all_v counts disagree: rank 0 sends 3 elements to rank " + std::to_string(peer) + ", which expects 2";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  if (g->backend() != "self") {  // broken: later operations fail at once (self runs each on its own)
    EXPECT_THROW(g->barrier(), CommError);
  }
  if (n > 1) {
    // A rank calling something else is the signature check's mismatch, as for any collective.
    auto h = world->split(0, me, "a2av-skip");
    ASSERT_TRUE(h);
    Tensor a = make(DType::F32, 2 * n), b = make(DType::F32, 2 * n);
    try {
      if (me == n - 1)
        h->all_to_all(a, b);
      else
        h->all_to_all_v(a, std::vector<int64_t>(n, 2), b, std::vector<int64_t>(n, 2));
      FAIL() << "expected an error";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("collective mismatch"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(n - 1) + " called all_to_all #1"),
                std::string::npos)
          << e.what();
    }
  }
  world->barrier();
}

TEST(Collectives, AllToAllVCountsWhatThisRankSends) {
  const int n = world->size(), me = world->rank();
  auto g = world->split(0, me, "a2av-counted");
  ASSERT_TRUE(g);
  auto count = [](int i, int j) { return int64_t{i + 2 * j}; };
  int64_t sent = 0;
  for (int j = 0; j < n; ++j) sent += count(me, j);
  check_all_to_all_v(*g, DType::BF16, count, false, "counted");
  check_all_to_all_v(*g, DType::I32, count, true, "counted");
  // Rejected: counts nothing.
  EXPECT_THROW(g->all_to_all_v(make(DType::F32, 1), std::vector<int64_t>(n, 2), make(DType::F32, 2 * n),
                               std::vector<int64_t>(n, 2)),
               ShapeError);
  // Each rank counts its own sent bytes (bf16, then int32): they differ from rank to rank.
  const OpCounts got = g->counts();
  EXPECT_EQ(got.calls_of(OpKind::AllToAllV), 2);
  EXPECT_EQ(got.bytes_of(OpKind::AllToAllV), 2 * sent + 4 * sent);
  EXPECT_EQ(got.total_calls(), 2);
  EXPECT_NE(got.text().find("all_to_all_v 2 calls " + std::to_string(6 * sent) + " B"), std::string::npos)
      << got.text();
}

TEST(Collectives, Bf16SumsAccumulateInFp32) {
  // 256 + 1 + 1 ... : adding ones one by one in bf16 would stay at 256.
  const int n = world->size();
  Tensor x = make(DType::BF16, 3);
  for (int i = 0; i < 3; ++i) set(x, i, world->rank() == 0 ? 256.0 : 1.0);
  world->all_reduce(x, ReduceOp::Sum);
  EXPECT_EQ(get(x, 0), bf16_to_f32(f32_to_bf16(256.0f + static_cast<float>(n - 1))));
}

TEST(Collectives, SplitMakesOrderedSubgroups) {
  const int n = world->size(), me = world->rank();
  // Even and odd ranks, ordered by descending world rank.
  auto sub = world->split(me % 2, -me, me % 2 ? "odd" : "even");
  ASSERT_TRUE(sub);
  std::vector<int> members;
  for (int r = me % 2; r < n; r += 2) members.push_back(r);
  EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(sub->rank(), static_cast<int>(members.size()) - 1 - me / 2);
  EXPECT_EQ(sub->group_name(), me % 2 ? "odd" : "even");
  Tensor x = make(DType::I32, 1);
  set(x, 0, me);
  sub->all_reduce(x, ReduceOp::Sum);
  int want = 0;
  for (int r : members) want += r;
  EXPECT_EQ(get(x, 0), want);
  // A negative color leaves a rank out.
  auto only0 = world->split(me == 0 ? 0 : -1, 0);
  EXPECT_EQ(static_cast<bool>(only0), me == 0);
}

TEST(Collectives, AsyncHandlesCompleteInIssueOrder) {
  const int n = world->size();
  std::vector<Tensor> xs;
  std::vector<WorkPtr> ws;
  for (int k = 0; k < 8; ++k) {
    xs.push_back(input(DType::F32, 100 + k, world->rank()));
    ws.push_back(world->all_reduce_async(xs.back(), ReduceOp::Sum));
  }
  ws.back()->wait();  // later ones finish after earlier ones
  for (int k = 0; k < 8; ++k) {
    EXPECT_TRUE(ws[k]->test());
    for (int64_t i = 0; i < 100 + k; ++i) ASSERT_EQ(get(xs[k], i), reduce_ref(ReduceOp::Sum, i, DType::F32, n));
  }
}

TEST(Collectives, SendRecvRingBothDirectionsInFlight) {
  const int n = world->size(), me = world->rank();
  if (n == 1) GTEST_SKIP() << "needs a peer";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  // Large enough for a rendezvous protocol: both sends are in flight before any receive completes.
  const int64_t c = 1 << 20;
  Tensor out = input(DType::F32, c, me), in = make(DType::F32, c);
  auto s = world->send_async(out, next, 3);
  auto r = world->recv_async(in, prev, 3);
  s->wait();
  r->wait();
  for (int64_t i = 0; i < c; i += 4099) ASSERT_EQ(get(in, i), value(prev, i, DType::F32));
}

TEST(Collectives, BadArgumentsAreErrorsWithContext) {
  const int n = world->size();
  Tensor out = make(DType::F32, 10), wrong = make(DType::F32, 11);
  try {
    world->all_gather(wrong, out);
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[comm.all_gather]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(world->rank()) + "/" + std::to_string(n)),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(world->broadcast(out, n), ShapeError);
  Tensor ints = make(DType::I32, 4);
  EXPECT_THROW(world->all_reduce(ints, ReduceOp::Avg), ShapeError);
  world->barrier();  // the group still works after rejected calls
}

TEST(Collectives, CountsCallsAndPayloadBytesPerKind) {
  const int n = world->size(), me = world->rank();
  const int64_t before_split = world->counts().calls_of(OpKind::Split);
  // A group of its own starts at zero, whatever the world has done.
  auto g = world->split(0, me, "counted");
  ASSERT_TRUE(g);
  EXPECT_EQ(world->counts().calls_of(OpKind::Split), before_split + 1);
  EXPECT_EQ(g->counts(), OpCounts{});
  EXPECT_EQ(g->counts().text(), "none");
  const int64_t c = 3 * n + 1;  // not divisible by the group size
  const Shard mine = shard_of(c, n, me);
  Tensor f = input(DType::F32, c, me), h = input(DType::BF16, c, me), part = make(DType::F32, mine.count);
  g->all_reduce(f, ReduceOp::Sum);
  g->all_reduce(h, ReduceOp::Max);
  g->reduce(f, ReduceOp::Sum, n - 1);
  g->broadcast(h, 0);
  g->all_gather(input(DType::F32, mine.count, me), f);  // the output's bytes
  g->gather(input(DType::F32, mine.count, me), me == 0 ? f : Tensor(), 0, c);
  g->scatter(me == 0 ? f : Tensor(), part, 0, c);
  g->reduce_scatter(f, part, ReduceOp::Sum);  // the input's bytes
  Tensor a = input(DType::I32, 2 * n, me), b = make(DType::I32, 2 * n);
  g->all_to_all(a, b);
  g->barrier();
  auto w = g->all_reduce_async(f, ReduceOp::Sum);  // counted as it is issued
  const int64_t issued = g->counts().calls_of(OpKind::AllReduce);
  w->wait();
  EXPECT_EQ(issued, 3);
  auto sub = g->split(0, me, "sub");
  // Rejected calls count nothing.
  Tensor ints = make(DType::I32, 4);
  EXPECT_THROW(g->all_reduce(ints, ReduceOp::Avg), ShapeError);
  EXPECT_THROW(g->broadcast(f, n), ShapeError);
  const bool p2p = n > 1;
  if (p2p) {
    Tensor out = input(DType::U16, 9, me), in = make(DType::U16, 9);
    auto s = g->send_async(out, (me + 1) % n, 1);
    g->recv(in, (me + n - 1) % n, 1);
    s->wait();
  }
  OpCounts want;
  auto set_kind = [&](OpKind k, int64_t calls, int64_t bytes) {
    want.calls[static_cast<int>(k)] = calls;
    want.bytes[static_cast<int>(k)] = bytes;
  };
  set_kind(OpKind::AllReduce, 3, 4 * c + 2 * c + 4 * c);
  set_kind(OpKind::Reduce, 1, 4 * c);
  set_kind(OpKind::Broadcast, 1, 2 * c);
  set_kind(OpKind::AllGather, 1, 4 * c);
  set_kind(OpKind::Gather, 1, 4 * c);
  set_kind(OpKind::Scatter, 1, 4 * c);
  set_kind(OpKind::ReduceScatter, 1, 4 * c);
  set_kind(OpKind::AllToAll, 1, 4 * 2 * n);
  set_kind(OpKind::Barrier, 1, 0);
  set_kind(OpKind::Split, 1, 0);
  if (p2p) {
    set_kind(OpKind::Send, 1, 18);
    set_kind(OpKind::Recv, 1, 18);
  }
  const OpCounts got = g->counts();
  EXPECT_EQ(got, want);
  EXPECT_EQ(got.total_calls(), p2p ? 14 : 12);
  EXPECT_EQ(got.total_bytes(), 32 * c + 8 * n + (p2p ? 36 : 0));
  EXPECT_NE(got.text().find("all_reduce 3 calls " + std::to_string(10 * c) + " B, reduce 1 call"), std::string::npos)
      << got.text();
  // Differences between readings; a reset starts over; the new group counts on its own.
  const OpCounts mark = g->counts();
  g->barrier();
  const OpCounts d = g->counts() - mark;
  EXPECT_EQ(d.total_calls(), 1);
  EXPECT_EQ(d.calls_of(OpKind::Barrier), 1);
  g->reset_counts();
  EXPECT_EQ(g->counts(), OpCounts{});
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->counts(), OpCounts{});
}

int main(int argc, char** argv) {
  // Optional argument: the backend (auto, self, mpi or nccl); auto picks mpi under a multi-rank launcher.
  test_util::WorldMain o;
  o.timeout_s = 30;
  return test_util::world_test_main(argc, argv, world, o);
}
