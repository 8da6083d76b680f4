// Point-to-point messages on a backend given as the argument (mpi or nccl),
// as pipeline parallelism uses them: neighbours that send to each other
// before either receives (8 MB each way, larger than any eager buffer),
// sends to both neighbours at once, rings of several messages in flight,
// tags that are received in another order than sent, odd and zero counts,
// host tensors, a collective issued while a message is in flight, and the
// counts and argument checks. On mpi the messages are in host memory, on
// nccl in device memory (one GPU per rank; host tensors are staged). Run
// under mpirun with two or more ranks; exits 77 (a ctest skip) for nccl
// without a GPU, without NCCL, or with fewer GPUs than ranks on a node.
// Timeouts and mismatches end the job, so they are in p2p_faults.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology.h"
#include "core/gpu.h"
#include "world_main.h"

using namespace parallm;
using namespace parallm::comm;

namespace {

Communicator* world = nullptr;
bool on_device = false;  // messages in device memory (nccl)

// Exact in every type: small integers (bf16 holds them, uint16 holds them offset).
float value(int rank, int64_t i, int salt) {
  return static_cast<float>((rank * 131 + i * 7 + salt * 17) % 251 - 125);
}

// A message buffer: host memory, or device memory filled from the host.
struct Msg {
  DType dt;
  int64_t n;
  bool device;
  gpu::DeviceBuffer dev;
  std::vector<char> host;
  Tensor t;

  Msg(DType dtype, int64_t count, bool in_device_memory = on_device)
      : dt(dtype), n(count), device(in_device_memory), host(std::max<size_t>(1, bytes())) {
    if (device) {
      dev = gpu::DeviceBuffer(std::max<size_t>(1, bytes()), MemCategory::Other);
      t = Tensor::view_of(dev.data(), {n}, dt, Device::cuda(gpu::current_device()));
    } else {
      t = Tensor::view_of(host.data(), {n}, dt);
    }
  }
  size_t bytes() const { return static_cast<size_t>(n) * dtype_size(dt); }
  // This rank's values (`rank`, `salt`), or zeros.
  Msg& fill(int rank, int salt) {
    for (int64_t i = 0; i < n; ++i) put(i, value(rank, i, salt));
    if (device && n) gpu::memcpy_h2d(dev.data(), host.data(), bytes());
    return *this;
  }
  Msg& zero() {
    std::fill(host.begin(), host.end(), 0);
    if (device && n) gpu::memcpy_h2d(dev.data(), host.data(), bytes());
    return *this;
  }
  // Element i as a float, after the message arrived.
  float at(int64_t i) {
    if (device && !synced) {
      if (n) gpu::memcpy_d2h(host.data(), dev.data(), bytes());
      synced = true;
    }
    switch (dt) {
      case DType::F32:
        return reinterpret_cast<const float*>(host.data())[i];
      case DType::BF16:
        return bf16_to_f32(reinterpret_cast<const uint16_t*>(host.data())[i]);
      case DType::I32:
        return static_cast<float>(reinterpret_cast<const int32_t*>(host.data())[i]);
      case DType::U16:
        return static_cast<float>(reinterpret_cast<const uint16_t*>(host.data())[i]) - 125.0f;
    }
    return 0;
  }
  // Every element holds `rank`'s value for `salt` (checked at a stride, and the ends).
  ::testing::AssertionResult holds(int rank, int salt) {
    const int64_t stride = n > 100000 ? 4099 : 1;
    for (int64_t i = 0; i < n; i += stride)
      if (at(i) != value(rank, i, salt))
        return ::testing::AssertionFailure() << dtype_name(dt) << " x " << n << ": element " << i << " is " << at(i)
                                             << ", rank " << rank << " sent " << value(rank, i, salt);
    if (n && at(n - 1) != value(rank, n - 1, salt))
      return ::testing::AssertionFailure() << dtype_name(dt) << " x " << n << ": the last element is " << at(n - 1);
    return ::testing::AssertionSuccess();
  }

 private:
  bool synced = false;
  void put(int64_t i, float v) {
    switch (dt) {
      case DType::F32:
        reinterpret_cast<float*>(host.data())[i] = v;
        break;
      case DType::BF16:
        reinterpret_cast<uint16_t*>(host.data())[i] = f32_to_bf16(v);
        break;
      case DType::I32:
        reinterpret_cast<int32_t*>(host.data())[i] = static_cast<int32_t>(v);
        break;
      case DType::U16:
        reinterpret_cast<uint16_t*>(host.data())[i] = static_cast<uint16_t>(v + 125.0f);
        break;
    }
  }
};

int next_rank() {
  return (world->rank() + 1) % world->size();
}
int prev_rank() {
  return (world->rank() + world->size() - 1) % world->size();
}

}  // namespace

// Both ranks of a pair post an 8 MB send to the other before their receive,
// and each waits for its receive before its send: on MPI the sends are past
// the eager limit (rendezvous), on NCCL an unpaired send holds its stream.
TEST(P2p, TwoRanksSendBeforeReceiving8MB) {
  const int me = world->rank(), partner = me ^ 1;
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  if (partner >= world->size()) GTEST_SKIP() << "the last rank of an odd world has no partner";
  for (auto [dt, n] :
       {std::pair{DType::F32, (int64_t{8} << 20) / 4 + 1}, std::pair{DType::BF16, (int64_t{8} << 20) / 2 + 3}}) {
    Msg out(dt, n), in(dt, n);
    out.fill(me, 1);
    in.zero();
    WorkPtr s = world->send_async(out.t, partner, 7);
    WorkPtr r = world->recv_async(in.t, partner, 7);
    r->wait();
    s->wait();
    EXPECT_TRUE(in.holds(partner, 1));
  }
}

// Every rank sends to both neighbours before receiving from either (tags
// tell the directions apart), odd counts, three types; waits in reverse order.
TEST(P2p, ExchangeWithBothNeighboursAtOnce) {
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  const int me = world->rank();
  for (DType dt : {DType::F32, DType::BF16, DType::I32})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
      Msg to_next(dt, n), to_prev(dt, n), from_prev(dt, n), from_next(dt, n);
      to_next.fill(me, 2);
      to_prev.fill(me, 3);
      from_prev.zero();
      from_next.zero();
      std::vector<WorkPtr> w;
      w.push_back(world->send_async(to_next.t, next_rank(), 1));
      w.push_back(world->send_async(to_prev.t, prev_rank(), 2));
      w.push_back(world->recv_async(from_prev.t, prev_rank(), 1));
      w.push_back(world->recv_async(from_next.t, next_rank(), 2));
      for (auto it = w.rbegin(); it != w.rend(); ++it) (*it)->wait();
      EXPECT_TRUE(from_prev.holds(prev_rank(), 2)) << "from the previous rank";
      EXPECT_TRUE(from_next.holds(next_rank(), 3)) << "from the next rank";
    }
}

// A ring with several messages in flight per rank: they arrive in the order
// sent, whatever order they are waited for.
TEST(P2p, RingOfSendsKeepsTheirOrder) {
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  const int me = world->rank();
  const std::vector<int64_t> sizes = {5, 1001, 3, 65537, 0, 262147};
  std::vector<std::unique_ptr<Msg>> outs, ins;
  std::vector<WorkPtr> sends, recvs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    outs.push_back(std::make_unique<Msg>(DType::F32, sizes[k]));
    outs.back()->fill(me, 10 + static_cast<int>(k));
    sends.push_back(world->send_async(outs.back()->t, next_rank(), 3));
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    ins.push_back(std::make_unique<Msg>(DType::F32, sizes[k]));
    ins.back()->zero();
    recvs.push_back(world->recv_async(ins.back()->t, prev_rank(), 3));
  }
  for (size_t k = sizes.size(); k-- > 0;) recvs[k]->wait();
  for (auto& s : sends) s->wait();
  for (size_t k = 0; k < sizes.size(); ++k) EXPECT_TRUE(ins[k]->holds(prev_rank(), 10 + static_cast<int>(k))) << k;
}

// Messages with different tags are separate: the receiver takes the later
// tag first and waits for it before it even posts the earlier one.
TEST(P2p, TagsAreReceivedInAnyOrder) {
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  const int me = world->rank();
  const int64_t n = 1 << 20;
  Msg a(DType::F32, n), b(DType::F32, n + 1), got_a(DType::F32, n), got_b(DType::F32, n + 1);
  a.fill(me, 20);
  b.fill(me, 21);
  got_a.zero();
  got_b.zero();
  WorkPtr sa = world->send_async(a.t, next_rank(), 10);
  WorkPtr sb = world->send_async(b.t, next_rank(), 11);
  world->recv(got_b.t, prev_rank(), 11);
  world->recv(got_a.t, prev_rank(), 10);
  sa->wait();
  sb->wait();
  EXPECT_TRUE(got_a.holds(prev_rank(), 20));
  EXPECT_TRUE(got_b.holds(prev_rank(), 21));
}

// Host tensors on either backend (nccl stages them), every type, and empty messages.
TEST(P2p, HostTensorsEveryTypeAndEmptyMessages) {
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  const int me = world->rank();
  for (DType dt : {DType::F32, DType::BF16, DType::I32, DType::U16})
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4097}}) {
      Msg out(dt, n, false), in(dt, n, false);
      out.fill(me, 30);
      in.zero();
      WorkPtr s = world->send_async(out.t, next_rank(), 4);
      world->recv(in.t, prev_rank(), 4);
      s->wait();
      EXPECT_TRUE(in.holds(prev_rank(), 30)) << dtype_name(dt) << " x " << n;
    }
}

// A collective issued behind a message in flight: the message still moves
// while the collective waits for the ranks that need it first.
TEST(P2p, MessagesMoveWhileACollectiveWaits) {
  const int me = world->rank(), partner = me ^ 1;
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  Msg x(DType::F32, 64);
  x.fill(me, 40);
  const int64_t n = 1 << 20;
  Msg out(DType::F32, n), in(DType::F32, n);
  out.fill(me, 41);
  in.zero();
  if (partner < world->size() && me % 2 == 0) {
    WorkPtr s = world->send_async(out.t, partner, 5);
    world->all_reduce_async(x.t, ReduceOp::Sum)->wait();  // the partner joins only once the message is in
    s->wait();
  } else if (partner < world->size()) {
    world->recv(in.t, partner, 5);
    EXPECT_TRUE(in.holds(partner, 41));
    world->all_reduce_async(x.t, ReduceOp::Sum)->wait();
  } else {
    world->all_reduce_async(x.t, ReduceOp::Sum)->wait();
  }
  float want = 0;
  for (int r = 0; r < world->size(); ++r) want += value(r, 5, 40);
  EXPECT_EQ(x.at(5), want);
}

// Sends and receives count as OpCounts says (calls, and the tensor's bytes).
TEST(P2p, CountedAsSendAndRecv) {
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  const int me = world->rank();
  auto g = world->split(0, me, "p2p-counted");
  ASSERT_TRUE(g);
  Msg a(DType::F32, 9), b(DType::BF16, 5), got_a(DType::F32, 9), got_b(DType::BF16, 5);
  a.fill(me, 50);
  b.fill(me, 51);
  WorkPtr s1 = g->send_async(a.t, next_rank(), 0);
  WorkPtr s2 = g->send_async(b.t, next_rank(), 1);
  g->recv(got_a.t, prev_rank(), 0);
  g->recv(got_b.t, prev_rank(), 1);
  s1->wait();
  s2->wait();
  const OpCounts c = g->counts();
  EXPECT_EQ(c.calls_of(OpKind::Send), 2);
  EXPECT_EQ(c.bytes_of(OpKind::Send), 9 * 4 + 5 * 2);
  EXPECT_EQ(c.calls_of(OpKind::Recv), 2);
  EXPECT_EQ(c.bytes_of(OpKind::Recv), 9 * 4 + 5 * 2);
  EXPECT_EQ(c.total_calls(), 4);
  EXPECT_NE(c.text().find("send 2 calls 46 B, recv 2 calls 46 B"), std::string::npos) << c.text();
  EXPECT_TRUE(got_a.holds(prev_rank(), 50));
  EXPECT_TRUE(got_b.holds(prev_rank(), 51));
}

// A peer outside the group or a tag out of range is refused as issued,
// naming the operation, and counts nothing; on nccl so is a message to the
// rank itself. The group still works afterwards.
TEST(P2p, BadArgumentsAreRefusedAtOnce) {
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  const int n = world->size();
  auto g = world->split(0, world->rank(), "p2p-refused");
  Msg m(DType::F32, 4);
  m.fill(world->rank(), 60);
  try {
    g->send_async(m.t, n, 0);
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[comm.send]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(n) + " is not in group p2p-refused"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(g->recv_async(m.t, -1, 0), ShapeError);
  EXPECT_THROW(g->send_async(m.t, 0, 32768), ShapeError);
  EXPECT_THROW(g->recv_async(m.t, 0, -1), ShapeError);
  if (world->backend() == "nccl") {
    try {
      g->send_async(m.t, world->rank(), 0);
      FAIL() << "expected an error";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("to this rank itself"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(g->counts(), OpCounts{});
  g->barrier();
}

int main(int argc, char** argv) {
  test_util::WorldMain o;
  o.default_backend = "mpi";
  o.on_world = [](Communicator& w) { on_device = w.backend() == "nccl"; };
  return test_util::world_test_main(argc, argv, world, o);
}
